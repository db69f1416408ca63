//go:build integration

package soak

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// claimVersion is what the soak keeps of one PVC version.
type claimVersion struct {
	Seen      time.Time // when the watch delivered it
	RV        string
	Request   int64
	Capacity  int64
	Allocated int64 // 0 = absent
	State     string
	Error     string // reason of ControllerResizeError, "" if none
	Class     string // spec.volumeAttributesClassName
	Current   string // status.currentVolumeAttributesClassName
	Modify    string // modifyVolumeStatus "status(target)", "" if none
	Audit     int    // the touch number in the other writer's condition (auditCondition), 0 if none
	Summary   string // scenario.Describe
}

// volumeVersion is what the soak keeps of one PV version.
type volumeVersion struct {
	Seen     time.Time
	RV       string
	Capacity int64
}

// leaseVersion is one version of the resizers' Lease.
type leaseVersion struct {
	Seen     time.Time
	Holder   string
	Acquired time.Time
	Renewed  time.Time
}

// recorder watches every PVC of the soak's namespaces, every PV and the resizers' Lease, in
// resourceVersion order, across apiserver and etcd restarts (a watch that ends is resumed from
// the last version seen; a version too old to resume from is listed again).
type recorder struct {
	mu      sync.Mutex
	claims  map[string][]claimVersion  // ns/name
	volumes map[string][]volumeVersion // PV name
	lease   []leaseVersion
	claimPV map[string]string // ns/name -> PV name
	spaces  map[string]bool
}

func startRecorder(t *testing.T, e *scenario.Env, spaces []string) *recorder {
	r := &recorder{claims: map[string][]claimVersion{}, volumes: map[string][]volumeVersion{}, claimPV: map[string]string{}, spaces: map[string]bool{}}
	for _, ns := range spaces {
		r.spaces[ns] = true
	}
	ctx, cancel := context.WithCancel(e.Ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	c := e.Client
	run := func(list func(context.Context) (string, []runtime.Object, error), w func(context.Context, string) (watch.Interface, error)) {
		wg.Add(1)
		go func() { defer wg.Done(); r.follow(ctx, list, w) }()
	}
	run(func(ctx context.Context) (string, []runtime.Object, error) {
		l, err := c.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", nil, err
		}
		var out []runtime.Object
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		return l.ResourceVersion, out, nil
	}, func(ctx context.Context, rv string) (watch.Interface, error) {
		return c.CoreV1().PersistentVolumeClaims("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	})
	run(func(ctx context.Context) (string, []runtime.Object, error) {
		l, err := c.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", nil, err
		}
		var out []runtime.Object
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
		return l.ResourceVersion, out, nil
	}, func(ctx context.Context, rv string) (watch.Interface, error) {
		return c.CoreV1().PersistentVolumes().Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	})
	run(leaseLister(c, e.Namespace))
	return r
}

func leaseLister(c kubernetes.Interface, ns string) (func(context.Context) (string, []runtime.Object, error), func(context.Context, string) (watch.Interface, error)) {
	return func(ctx context.Context) (string, []runtime.Object, error) {
			l, err := c.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return "", nil, err
			}
			var out []runtime.Object
			for i := range l.Items {
				out = append(out, &l.Items[i])
			}
			return l.ResourceVersion, out, nil
		}, func(ctx context.Context, rv string) (watch.Interface, error) {
			return c.CoordinationV1().Leases(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		}
}

// follow lists, then watches from the list's version, and resumes after every end of the
// watch (apiserver restart) from the last version it saw.
func (r *recorder) follow(ctx context.Context, list func(context.Context) (string, []runtime.Object, error), w func(context.Context, string) (watch.Interface, error)) {
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			lrv, objs, err := list(ctx)
			if err != nil {
				pause(ctx, 500*time.Millisecond) // apiserver down: try again
				continue
			}
			for _, o := range objs {
				r.add(o)
			}
			rv = lrv
		}
		wi, err := w(ctx, rv)
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			pause(ctx, 500*time.Millisecond)
			continue
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				if st, ok := ev.Object.(*metav1.Status); ok && (st.Code == 410) {
					rv = ""
				}
				break
			}
			if m, ok := ev.Object.(metav1.Object); ok {
				rv = m.GetResourceVersion()
				if ev.Type != watch.Deleted {
					r.add(ev.Object)
				}
			}
		}
		wi.Stop()
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (r *recorder) add(o runtime.Object) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch x := o.(type) {
	case *v1.PersistentVolumeClaim:
		if !r.spaces[x.Namespace] {
			return
		}
		k := x.Namespace + "/" + x.Name
		if vs := r.claims[k]; len(vs) > 0 && vs[len(vs)-1].RV == x.ResourceVersion {
			return // a re-list of a version already seen
		}
		r.claims[k] = append(r.claims[k], snapshotClaim(now, x))
		if x.Spec.VolumeName != "" {
			r.claimPV[k] = x.Spec.VolumeName
		}
	case *v1.PersistentVolume:
		if vs := r.volumes[x.Name]; len(vs) > 0 && vs[len(vs)-1].RV == x.ResourceVersion {
			return
		}
		q := x.Spec.Capacity[v1.ResourceStorage]
		r.volumes[x.Name] = append(r.volumes[x.Name], volumeVersion{Seen: now, RV: x.ResourceVersion, Capacity: q.Value()})
	case *coordinationv1.Lease:
		if !strings.HasPrefix(x.Name, "external-resizer-") {
			return
		}
		lv := leaseVersion{Seen: now}
		if x.Spec.HolderIdentity != nil {
			lv.Holder = *x.Spec.HolderIdentity
		}
		if x.Spec.AcquireTime != nil {
			lv.Acquired = x.Spec.AcquireTime.Time
		}
		if x.Spec.RenewTime != nil {
			lv.Renewed = x.Spec.RenewTime.Time
		}
		r.lease = append(r.lease, lv)
	}
}

func snapshotClaim(now time.Time, pvc *v1.PersistentVolumeClaim) claimVersion {
	req, capacity, alloc := scenario.Storage(pvc)
	cv := claimVersion{Seen: now, RV: pvc.ResourceVersion, Request: req.Value(), Capacity: capacity.Value(), Allocated: alloc.Value(),
		State: string(scenario.State(pvc)), Summary: scenario.Describe(pvc)}
	if c := scenario.Condition(pvc, v1.PersistentVolumeClaimControllerResizeError); c != nil {
		cv.Error = c.Reason
	}
	if pvc.Spec.VolumeAttributesClassName != nil {
		cv.Class = *pvc.Spec.VolumeAttributesClassName
	}
	cv.Current = scenario.CurrentClass(pvc)
	if c := scenario.Condition(pvc, auditCondition); c != nil {
		_, _ = fmt.Sscanf(c.Message, "touch %d", &cv.Audit)
	}
	if st, target := scenario.ModifyStatus(pvc); st != "" {
		cv.Modify = fmt.Sprintf("%s(%s)", st, target)
	}
	return cv
}

// claimVersions returns a copy of the PVC's versions.
func (r *recorder) claimVersions(key string) []claimVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]claimVersion(nil), r.claims[key]...)
}

// pvCapacityAt returns the PV's capacity in the last version seen no later than at: a lower
// bound of its capacity at that moment, since a controller expansion's capacity only grows.
func (r *recorder) pvCapacityAt(pv string, at time.Time) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var c int64
	found := false
	for _, v := range r.volumes[pv] {
		if v.Seen.After(at) {
			break
		}
		c, found = v.Capacity, true
	}
	return c, found
}

// leaseVersions returns the Lease's versions, in the order seen.
func (r *recorder) leaseVersions() []leaseVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]leaseVersion(nil), r.lease...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seen.Before(out[j].Seen) })
	return out
}

// claimPVName is the PV the PVC is bound to.
func (r *recorder) claimPVName(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.claimPV[key]
}
