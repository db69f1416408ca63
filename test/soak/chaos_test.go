//go:build integration

package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// chaosEvent is one thing the soak did to the system.
type chaosEvent struct {
	Time   time.Time
	Kind   string // raise, lower, recover, class, kubelet-done, kubelet-infeasible, touch, faults, kill, freeze, thaw, apiserver-restart, etcd-restart, resizer-exited, template
	PVC    string // ns/name, "" for the whole system
	Detail string
}

type chaosLog struct {
	logf   func(format string, args ...any) // system-wide events also go to the test log
	mu     sync.Mutex
	events []chaosEvent
	counts map[string]int
}

func (l *chaosLog) add(kind, pvc, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.counts == nil {
		l.counts = map[string]int{}
	}
	now := time.Now()
	l.events = append(l.events, chaosEvent{Time: now, Kind: kind, PVC: pvc, Detail: detail})
	l.counts[kind]++
	if pvc == "" && l.logf != nil {
		l.logf("%s chaos %s: %s", now.Format("15:04:05.000"), kind, detail)
	}
}

// write saves every event, one JSON object per line.
func (l *chaosLog) write(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b []byte
	for _, e := range l.events {
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		b = append(append(b, line...), '\n')
	}
	return os.WriteFile(path, b, 0o644)
}

func (l *chaosLog) forPVC(key string) []chaosEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []chaosEvent
	for _, e := range l.events {
		if e.PVC == key || e.PVC == "" {
			out = append(out, e)
		}
	}
	return out
}

func (l *chaosLog) all(kind string) []chaosEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []chaosEvent
	for _, e := range l.events {
		if kind == "" || e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func (l *chaosLog) count(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[kind]
}

// policyFaults are the driver's standing refusals: sizes above the limits and the refused
// class. They stay through the quiet period.
func policyFaults() []framework.Fault {
	return []framework.Fault{
		{Method: "ControllerModifyVolume", Code: codes.InvalidArgument, Message: "soak: tier refused", MutableParameter: badParameter},
		{Method: "ControllerExpandVolume", Code: codes.InvalidArgument, Message: "soak: size above the hard limit", MinRequiredBytes: invalidArgumentFrom},
		{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: "soak: size above the pool", MinRequiredBytes: outOfRangeFrom},
	}
}

func (s *soak) setFaults(t *testing.T, extra []framework.Fault) {
	s.env.Driver.SetFaults(t, append(policyFaults(), extra...))
}

// randomFaults draws the next fault epoch: a few volumes get an error of any gRPC code, a
// delay past --timeout, or a refused modification, for a few calls each; sometimes the whole
// driver is UNAVAILABLE for a while.
func (s *soak) randomFaults() ([]framework.Fault, string) {
	var out []framework.Fault
	n := 1 + len(s.claims)/20
	for i := 0; i < n; i++ {
		c := s.claims[s.rng.Intn(len(s.claims))]
		code := codes.Code(1 + s.rng.Intn(16)) // every code but OK
		times := 1 + s.rng.Intn(3)
		switch k := s.rng.Intn(10); {
		case k < 6:
			out = append(out, framework.Fault{Method: "ControllerExpandVolume", VolumeID: c.Volume, Code: code, Message: "soak: injected " + code.String(), Times: times})
		case k < 8:
			// Past --timeout: the resizer gives up (DEADLINE_EXCEEDED on its side) while the
			// driver goes on and completes the call.
			out = append(out, framework.Fault{Method: "ControllerExpandVolume", VolumeID: c.Volume, Delay: callTimeout + 2*time.Second, Times: 1})
		default:
			out = append(out, framework.Fault{Method: "ControllerModifyVolume", VolumeID: c.Volume, Code: code, Message: "soak: injected " + code.String(), Times: times})
		}
	}
	if s.rng.Intn(5) == 0 {
		code := []codes.Code{codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted}[s.rng.Intn(3)]
		out = append(out, framework.Fault{Method: "ControllerExpandVolume", Code: code, Message: "soak: driver-wide " + code.String(), Times: 5 + s.rng.Intn(10)})
	}
	b, _ := json.Marshal(out)
	return out, string(b)
}

// runChaos runs the chaos phase: the user, kubelet and meddler actors in goroutines, and the
// fault epochs and process events (kills, freezes, restarts) here.
func (s *soak) runChaos(t *testing.T) {
	ctx, cancel := context.WithCancel(s.env.Ctx)
	var wg sync.WaitGroup
	s.kubelet = &kubelet{s: s, rng: rand.New(rand.NewSource(s.cfg.Seed + 2))}
	s.kubelet.infeasible.Store(true)
	kctx, kcancel := context.WithCancel(s.env.Ctx)
	t.Cleanup(kcancel)
	go s.kubelet.run(kctx)
	for i, actor := range []func(context.Context, *rand.Rand){s.user, s.meddler} {
		wg.Add(1)
		rng := rand.New(rand.NewSource(s.cfg.Seed + 10 + int64(i)))
		go func() { defer wg.Done(); actor(ctx, rng) }()
	}
	end := s.started.Add(s.cfg.Duration)
	etcdAt := s.started.Add(s.cfg.Duration / 2)
	nextFaults, nextProc := time.Now(), time.Now().Add(s.procInterval())
	for time.Now().Before(end) {
		s.supervise(t)
		now := time.Now()
		switch {
		case !etcdAt.IsZero() && now.After(etcdAt):
			s.restartEtcd(t)
			etcdAt = time.Time{}
		case now.After(nextFaults):
			f, desc := s.randomFaults()
			s.setFaults(t, f)
			s.chaos.add("faults", "", desc)
			nextFaults = now.Add(10*time.Second + time.Duration(s.rng.Intn(10))*time.Second)
		case now.After(nextProc):
			s.processEvent(t)
			nextProc = time.Now().Add(s.procInterval())
		}
		pause(s.env.Ctx, 500*time.Millisecond) // the loop's tick
	}
	cancel()
	wg.Wait()
}

func (s *soak) procInterval() time.Duration {
	return 15*time.Second + time.Duration(s.rng.Intn(15))*time.Second
}

// processEvent kills the leader, freezes it past its lease, restarts the apiserver, or grows a
// StatefulSet's template.
func (s *soak) processEvent(t *testing.T) {
	switch k := s.rng.Intn(10); {
	case k >= 8:
		s.growTemplate(t)
	case k < 3:
		if p, i := s.leader(); p != nil {
			s.chaos.add("kill", "", fmt.Sprintf("SIGKILL resizer %d (pid %d), the leader", i, p.Pid()))
			_ = p.Kill()
		}
	case k < 6:
		if p, i := s.leader(); p != nil {
			d := leaseDuration + 3*time.Second
			s.chaos.add("freeze", "", fmt.Sprintf("SIGSTOP resizer %d (pid %d), the leader, for %s", i, p.Pid(), d))
			_ = p.Freeze()
			pause(s.env.Ctx, d) // the freeze itself: longer than the lease
			_ = p.Thaw()
			s.chaos.add("thaw", "", fmt.Sprintf("SIGCONT resizer %d", i))
		}
	default:
		s.chaos.add("apiserver-restart", "", "kube-apiserver stopping")
		s.env.StopAPIServer(t)
		s.env.StartAPIServer(t)
		s.chaos.add("apiserver-ready", "", "kube-apiserver ready again")
	}
}

// restartEtcd restarts etcd on its data dir and waits for the apiserver to serve again.
func (s *soak) restartEtcd(t *testing.T) {
	s.chaos.add("etcd-restart", "", "etcd stopping")
	if err := s.env.Cluster.Etcd.Stop(); err != nil {
		t.Logf("stop etcd: %v", err)
	}
	s.env.Cluster.Etcd.Start(t)
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		_, err := s.env.Client.CoreV1().Namespaces().Get(s.env.Ctx, s.env.Namespace, metav1.GetOptions{})
		return err == nil, fmt.Sprintf("apiserver not serving after the etcd restart: %v", err)
	})
	s.chaos.add("etcd-ready", "", "apiserver serving from the restarted etcd")
}

// supervise starts again a resizer that exited (killed, or exiting after it lost the lease),
// as a Deployment would.
func (s *soak) supervise(t *testing.T) {
	for i, p := range s.resizers {
		if exited, err := p.Exited(); exited {
			s.chaos.add("resizer-exited", "", fmt.Sprintf("resizer %d exited (%v, code %d); starting it again", i, err, p.ExitCode()))
			p.Start(t)
		}
	}
	if p := s.setResizer; p != nil {
		if exited, err := p.Exited(); exited {
			s.chaos.add("resizer-exited", "", fmt.Sprintf("statefulset-resizer exited (%v); starting it again", err))
			p.Start(t)
		}
	}
}

// leader returns the running resizer that holds the Lease by its own log, or nil.
func (s *soak) leader() (*framework.Process, int) {
	for i, p := range s.resizers {
		if exited, _ := p.Exited(); exited {
			continue
		}
		runs := parseRuns(i, p.Log())
		if n := len(runs); n > 0 && len(runs[n-1].Acquired) > 0 {
			return p, i
		}
	}
	return nil, -1
}

// user is the people editing PVCs: requests raised, raised past the driver's limits, lowered
// while an expansion is under way or to recover from an infeasible one, classes changed and
// rolled back.
func (s *soak) user(ctx context.Context, rng *rand.Rand) {
	for ctx.Err() == nil {
		pause(ctx, time.Duration(150+rng.Intn(200))*time.Millisecond)
		c := s.editable[rng.Intn(len(s.editable))]
		pvc, err := s.env.Client.CoreV1().PersistentVolumeClaims(c.NS).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		req := pvc.Spec.Resources.Requests[v1.ResourceStorage]
		capq := pvc.Status.Capacity[v1.ResourceStorage]
		r, cp := req.Value(), capq.Value()
		stuck := string(pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]) == string(v1.PersistentVolumeClaimControllerResizeInfeasible) || r >= outOfRangeFrom
		switch k := rng.Intn(100); {
		case stuck && k < 60:
			s.setRequest(ctx, c, "recover", cp+gi)
		case k < 8 && cp < outOfRangeFrom-10*gi:
			s.setRequest(ctx, c, "raise-past-limit", []int64{outOfRangeFrom + 5*gi, invalidArgumentFrom + 5*gi}[rng.Intn(2)])
		case k < 70 && cp < 30*gi:
			s.setRequest(ctx, c, "raise", max(r, cp)+int64(1+rng.Intn(3))*gi)
		case k < 82 && r > cp+gi:
			s.setRequest(ctx, c, "lower", cp+gi)
		default:
			s.changeClass(ctx, c, pvc, rng)
		}
	}
}

func (s *soak) setRequest(ctx context.Context, c claimRef, kind string, bytes int64) {
	size := resource.NewQuantity(bytes, resource.BinarySI).String()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"resources": map[string]any{"requests": map[string]string{"storage": size}}}})
	_, err := s.env.Client.CoreV1().PersistentVolumeClaims(c.NS).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		s.chaos.add("refused-edit", c.key(), fmt.Sprintf("%s to %s: %v", kind, size, err))
		return
	}
	s.chaos.add(kind, c.key(), "request "+size)
}

// changeClass moves the PVC to another class, to the refused one, or rolls a refused one back.
func (s *soak) changeClass(ctx context.Context, c claimRef, pvc *v1.PersistentVolumeClaim, rng *rand.Rand) {
	spec := ""
	if pvc.Spec.VolumeAttributesClassName != nil {
		spec = *pvc.Spec.VolumeAttributesClassName
	}
	current := ""
	if pvc.Status.CurrentVolumeAttributesClassName != nil {
		current = *pvc.Status.CurrentVolumeAttributesClassName
	}
	var target any
	kind := "class"
	switch {
	case spec == badClass:
		kind, target = "class-rollback", current
		if current == "" {
			target = nil
		}
	case rng.Intn(4) == 0:
		target = badClass
	default:
		target = []string{"silver", "gold"}[rng.Intn(2)]
	}
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"volumeAttributesClassName": target}})
	if _, err := s.env.Client.CoreV1().PersistentVolumeClaims(c.NS).Patch(ctx, c.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		s.chaos.add("refused-edit", c.key(), fmt.Sprintf("%s to %v: %v", kind, target, err))
		return
	}
	s.chaos.add(kind, c.key(), fmt.Sprintf("class %v", target))
}

// auditCondition is the PVC condition the other writer (meddler) keeps: no resizer knows it, so
// every resizer write must keep it, and a write based on an older version must not bring an
// older one back.
const auditCondition v1.PersistentVolumeClaimConditionType = "soak.csi-resizer.io/Audited"

// meddler is another controller writing the PVCs while expansions run: labels and annotations,
// or (every other time) its own status condition, in an Update guarded by the resourceVersion it
// read, so that it and the resizer conflict with each other.
func (s *soak) meddler(ctx context.Context, rng *rand.Rand) {
	n := 0
	for ctx.Err() == nil {
		pause(ctx, time.Duration(100+rng.Intn(200))*time.Millisecond)
		c := s.claims[rng.Intn(len(s.claims))]
		pvc, err := s.env.Client.CoreV1().PersistentVolumeClaims(c.NS).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		n++
		// A controller takes a moment between its read and its write: the resizer's writes
		// in between make this one conflict, and this one makes the resizer's guarded ones.
		pause(ctx, time.Duration(rng.Intn(400))*time.Millisecond)
		what := "labels/annotations"
		if n%2 == 0 {
			what = "condition " + string(auditCondition)
			setAudit(pvc, n)
			_, err = s.env.Client.CoreV1().PersistentVolumeClaims(c.NS).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
		} else {
			touchMetadata(pvc, n)
			_, err = s.env.Client.CoreV1().PersistentVolumeClaims(c.NS).Update(ctx, pvc, metav1.UpdateOptions{})
		}
		switch {
		case apierrors.IsConflict(err):
			s.chaos.add("meddler-conflict", c.key(), what+" update lost a race")
		case err == nil:
			s.chaos.add("touch", c.key(), fmt.Sprintf("%s, touch %d", what, n))
		}
	}
}

func touchMetadata(pvc *v1.PersistentVolumeClaim, n int) {
	if pvc.Labels == nil {
		pvc.Labels = map[string]string{}
	}
	if pvc.Annotations == nil {
		pvc.Annotations = map[string]string{}
	}
	pvc.Labels["soak.csi-resizer.io/touched"] = fmt.Sprint(n % 7)
	pvc.Annotations["soak.csi-resizer.io/note"] = fmt.Sprintf("touch %d", n)
}

// setAudit adds or refreshes the other writer's condition; its message carries the touch number,
// which only grows (checkClaim).
func setAudit(pvc *v1.PersistentVolumeClaim, n int) {
	cond := v1.PersistentVolumeClaimCondition{Type: auditCondition, Status: v1.ConditionTrue, Reason: "Touched",
		Message: fmt.Sprintf("touch %d", n), LastTransitionTime: metav1.Now()}
	for i := range pvc.Status.Conditions {
		if pvc.Status.Conditions[i].Type == auditCondition {
			pvc.Status.Conditions[i] = cond
			return
		}
	}
	pvc.Status.Conditions = append(pvc.Status.Conditions, cond)
}

// kubelet plays the node steps (there is no kubelet): a PVC in NodeResizePending gets
// capacity = allocated with the state and FileSystemResizePending cleared, or, while chaos is
// on, sometimes NodeResizeInfeasible with a NodeResizeError condition.
type kubelet struct {
	s          *soak
	rng        *rand.Rand
	infeasible atomic.Bool
}

func (k *kubelet) run(ctx context.Context) {
	for ctx.Err() == nil {
		pause(ctx, 500*time.Millisecond)
		for _, ns := range k.s.spaces {
			list, err := k.s.env.Client.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for i := range list.Items {
				pvc := &list.Items[i]
				if pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] == v1.PersistentVolumeClaimNodeResizePending {
					k.step(ctx, pvc)
				}
			}
		}
	}
}

func (k *kubelet) step(ctx context.Context, pvc *v1.PersistentVolumeClaim) {
	key := pvc.Namespace + "/" + pvc.Name
	kind := "kubelet-done"
	if k.infeasible.Load() && k.rng.Intn(10) == 0 {
		kind = "kubelet-infeasible"
		pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] = v1.PersistentVolumeClaimNodeResizeInfeasible
		conds := []v1.PersistentVolumeClaimCondition{{Type: v1.PersistentVolumeClaimNodeResizeError, Status: v1.ConditionTrue,
			LastTransitionTime: metav1.Now(), Message: "soak: the filesystem refused to grow"}}
		for _, c := range pvc.Status.Conditions {
			if c.Type != v1.PersistentVolumeClaimNodeResizeError {
				conds = append(conds, c)
			}
		}
		pvc.Status.Conditions = conds
	} else {
		pvc.Status.Capacity[v1.ResourceStorage] = pvc.Status.AllocatedResources[v1.ResourceStorage]
		delete(pvc.Status.AllocatedResourceStatuses, v1.ResourceStorage)
		var conds []v1.PersistentVolumeClaimCondition
		for _, c := range pvc.Status.Conditions {
			if c.Type != v1.PersistentVolumeClaimFileSystemResizePending && c.Type != v1.PersistentVolumeClaimNodeResizeError {
				conds = append(conds, c)
			}
		}
		pvc.Status.Conditions = conds
	}
	alloc := pvc.Status.AllocatedResources[v1.ResourceStorage]
	_, err := k.s.env.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
	switch {
	case apierrors.IsConflict(err):
		k.s.chaos.add("kubelet-conflict", key, "node step lost a race; next round")
	case err == nil:
		k.s.chaos.add(kind, key, "allocated "+alloc.String())
	}
}

// quiet stops the chaos: only the driver's standing refusals stay, the kubelet always succeeds,
// and nobody edits PVCs, for 2 × --retry-interval-max.
func (s *soak) quiet(t *testing.T) {
	s.setFaults(t, nil)
	s.kubelet.infeasible.Store(false)
	s.chaos.add("quiet", "", fmt.Sprintf("faults stop; quiet for %s", s.cfg.QuietTime))
	end := time.Now().Add(s.cfg.QuietTime)
	for time.Now().Before(end) {
		s.supervise(t)
		pause(s.env.Ctx, 500*time.Millisecond)
	}
	s.quietAt = time.Now()
}
