//go:build integration

// Package demo is the walkthrough behind `make demo`: a local control plane, the mock CSI
// driver and csi-resizer, then a resize, an infeasible request and its recovery, a
// VolumeAttributesClass change and a class the driver refuses rolled back, and a StatefulSet's
// bigger volumeClaimTemplates size applied with kubectl through statefulset-resizer's webhook
// (the README's GitOps steps), narrated on stdout. With DEMO_KEEP_RUNNING=1 it then keeps
// everything running until SIGINT or SIGTERM; without it the test returns after the
// walkthrough, so it doubles as a smoke test:
//
//	go test -tags integration -count=1 -v -run TestDemo ./test/demo/
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

const (
	// EnvKeepRunning makes the demo block after the walkthrough until SIGINT/SIGTERM.
	EnvKeepRunning = "DEMO_KEEP_RUNNING"

	claim = "data"
	// driverLimit is the largest volume the mock driver accepts in the demo: a larger
	// ControllerExpandVolume is refused with OUT_OF_RANGE. infeasible is the demo's request
	// above it.
	driverLimit   = "50Gi"
	infeasible    = "100Gi"
	driverMessage = "the backend cannot create or grow a volume beyond " + driverLimit
	// classFast is a VolumeAttributesClass the mock accepts; classGold one it refuses with
	// INVALID_ARGUMENT (fault injection on its parameter refusedParam).
	classFast     = "fast"
	classGold     = "gold"
	refusedParam  = "tier"
	modifyMessage = "mutable parameter " + refusedParam + " is not supported by this backend"

	stepTimeout = 2 * time.Minute
)

// out is where the narration goes: straight to stdout, not through t.Log, so it reads as a
// program's output and not as test log lines.
var out io.Writer = os.Stdout

func say(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

// TestDemo is the walkthrough. See the package comment.
func TestDemo(t *testing.T) {
	keep := keepRunning(t)
	// Ctrl-C at any point stops the demo through the test's cleanups (which stop every
	// process and remove the temp dirs) instead of killing the test binary.
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if keep {
		// Registered first, so it runs last: after every process was stopped.
		t.Cleanup(func() {
			if t.Failed() {
				say("\nThe demo failed (details above). Every process it started is stopped, its temp dirs removed.")
				return
			}
			say("Stopped etcd, kube-apiserver, kube-controller-manager, the mock CSI driver, csi-resizer and")
			say("statefulset-resizer; removed their temp dirs.")
		})
	}
	// The demo is about the mock driver's fault injection: never pick up an e2e driver.
	for _, env := range []string{framework.EnvDriverCmd, framework.EnvDriverEndpoint, framework.EnvDriverName} {
		t.Setenv(env, "")
	}

	d := &demo{t: t, sig: sigCtx}
	t.Cleanup(d.removeResizerBuild)
	d.start()
	d.step1Expand()
	d.step2Infeasible()
	d.step3Recover()
	d.step4Modify()
	d.step5RefusedClass()
	d.step6GitOps()
	d.metrics()
	if !keep {
		say("\nDone (%s). Everything the demo started is being stopped; run `make demo` in a terminal to keep it running.", since(d.began))
		return
	}
	d.keepRunning()
}

func keepRunning(t *testing.T) bool {
	v := os.Getenv(EnvKeepRunning)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		t.Fatalf("%s=%q: want 1 or 0", EnvKeepRunning, v)
	}
	return b
}

type demo struct {
	t       *testing.T
	sig     context.Context
	e       *scenario.Env
	began   time.Time
	kubectl string // path of the harness's kubectl
	// seenEvents and seenCalls make each step print only what is new.
	seenEvents      map[string]int32
	seenCalls       int
	seenModifyCalls int
	pvName          string
	// Step 6: statefulset-resizer's controller and webhook, its binary, and the manifest file.
	ctrl     *framework.Process
	wh       *scenario.Webhook
	ssr      string
	manifest string
}

// start brings up the control plane, the mock driver (refusing sizes above driverLimit) and
// csi-resizer with the shipped RBAC, and creates the PVC.
func (d *demo) start() {
	t := d.t
	d.began = time.Now()
	say("")
	say("csi-resizer demo: volume expansion, an infeasible request and its recovery (KEP-1790),")
	say("a VolumeAttributesClass change and a refused one rolled back (KEP-3751), then a")
	say("StatefulSet's bigger volume applied with kubectl through statefulset-resizer (GitOps)")
	say("%s", strings.Repeat("=", 86))
	say("")
	say("Starting etcd, kube-apiserver and kube-controller-manager on 127.0.0.1, the mock CSI driver")
	say("on a unix socket and csi-resizer (the binary from ./cmd/csi-resizer, with the RBAC of")
	say("deploy/kubernetes/rbac)...")
	limit := resource.MustParse(driverLimit)
	d.e = scenario.Start(t, scenario.Options{Cluster: framework.ClusterOptions{ControllerManager: true}, Mock: framework.MockDriverOptions{ModifyVolume: true, Faults: []framework.Fault{{
		Method:           "ControllerExpandVolume",
		Code:             codes.OutOfRange,
		Message:          driverMessage,
		MinRequiredBytes: limit.Value() + 1,
	}, {
		Method:           "ControllerModifyVolume",
		Code:             codes.InvalidArgument,
		Message:          modifyMessage,
		MutableParameter: refusedParam,
	}}}})
	d.interruptedCheck()
	e := d.e
	d.kubectl = framework.Bin(t, "kubectl")
	d.seenEvents = map[string]int32{}
	say("Ready in %s.", since(d.began))
	say("")
	say("  kube-apiserver  %s (admin kubeconfig: %s)", e.Cluster.Host, e.Cluster.Kubeconfig)
	say("  controllers     kube-controller-manager, pid %d (StatefulSet, PV binder, garbage collector...)", e.Cluster.ControllerManager.Pid())
	say("  CSI driver      %s at %s, pid %d", e.Driver.Name, e.Driver.Endpoint, e.Driver.Process.Pid())
	say("                  (fault injected: ControllerExpandVolume above %s fails with OUT_OF_RANGE,", driverLimit)
	say("                  ControllerModifyVolume with the parameter %q fails with INVALID_ARGUMENT)", refusedParam)
	say("  csi-resizer     pid %d, metrics on http://%s/metrics", e.Resizer.Pid(), e.Resizer.HTTPAddr)
	say("                  %s %s", filepath.Base(e.Resizer.Binary), strings.Join(e.Resizer.Args, " "))
	say("  namespace       %s, StorageClass %s (allowVolumeExpansion: true)", e.Namespace, e.StorageClass)
	say("")
	say("Below, `kubectl` is %s --kubeconfig %s", d.kubectl, e.Cluster.Kubeconfig)

	say("")
	say("Setup: a 1Gi volume on the driver (CSI CreateVolume) and a PVC %q bound to it, as the", claim)
	say("external-provisioner and the PV controller would leave them.")
	_, pv := e.NewClaim(t, claim, "1Gi")
	d.pvName = pv.Name
	d.createClasses()
	d.seenCalls = len(e.Driver.Calls(t, "ControllerExpandVolume"))
	d.showClaim(true)
}

// removeResizerBuild removes the temp dir the framework built csi-resizer into. The
// framework leaves it to the next test run to remove (a test binary has no exit hook); the
// demo is the only test of its binary and this cleanup runs after every process stopped,
// so it can remove it right away and leave nothing behind.
func (d *demo) removeResizerBuild() {
	if d.e == nil || d.e.Resizer == nil {
		return
	}
	dir := filepath.Dir(d.e.Resizer.Binary)
	if strings.HasPrefix(filepath.Base(dir), fmt.Sprintf("csi-resizer-test-bin-%d-", os.Getpid())) {
		_ = os.RemoveAll(dir)
	}
}

// step1Expand: a plain expansion.
func (d *demo) step1Expand() {
	d.header(1, "expand the volume: 1Gi -> 2Gi")
	d.setRequest("2Gi", scenario.Done("2Gi"))
	d.waitEvent("VolumeResizeSuccessful")
	d.showClaim(false)
	say("")
	say("csi-resizer recorded the target (allocated=2Gi, ControllerResizeInProgress) before calling")
	say("the driver, then set the PV's capacity and the PVC's capacity and cleared the state.")
}

// step2Infeasible: a size the driver refuses.
func (d *demo) step2Infeasible() {
	d.header(2, "ask for more than the driver can give: 2Gi -> "+infeasible)
	pvc := d.setRequest(infeasible, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		c := scenario.Condition(pvc, v1.PersistentVolumeClaimControllerResizeError)
		return scenario.State(pvc) == v1.PersistentVolumeClaimControllerResizeInfeasible && c != nil,
			"want state ControllerResizeInfeasible and a ControllerResizeError condition"
	})
	d.waitEvent("VolumeResizeFailed")
	d.showClaim(false)
	if c := scenario.Condition(pvc, v1.PersistentVolumeClaimControllerResizeError); c == nil || c.Reason != "OutOfRange" || !strings.Contains(c.Message, driverMessage) {
		d.t.Errorf("ControllerResizeError condition = %+v, want reason OutOfRange with the driver's message %q", c, driverMessage)
	}
	d.showStuckGauge()
	say("")
	say("The driver said OUT_OF_RANGE, a final \"this size cannot be done\" answer. csi-resizer marked")
	say("the PVC ControllerResizeInfeasible, put the gRPC code in the condition's reason and the")
	say("driver's message in its message, and will retry only every --retry-interval-max (5m).")
	say("The volume itself is still 2Gi. To get out of this, lower the request: Kubernetes accepts")
	say("any size above status.capacity (2Gi), and the resizer then expands to that instead.")
}

// step3Recover: lower the request below the infeasible allocation.
func (d *demo) step3Recover() {
	d.header(3, "recover: lower the request "+infeasible+" -> 3Gi")
	d.setRequest("3Gi", scenario.Done("3Gi"))
	d.waitEvent("VolumeResizeRecovered")
	d.showClaim(false)
	pvc := d.e.PVC(d.t, claim)
	if _, _, alloc := scenario.Storage(pvc); !scenario.Is(alloc, "3Gi") {
		d.t.Errorf("allocatedResources = %s after the recovery, want 3Gi", alloc.String())
	}
	say("")
	say("A changed request skips the slow retry: csi-resizer saw that the previous attempt (%s)", infeasible)
	say("had failed for good, so the new target could follow the lower request. allocated went")
	say("from %s down to 3Gi, the driver was asked for 3Gi, and the PVC is healthy again.", infeasible)
}

// showStuckGauge prints csi_resizer_volume_infeasible for the claim, the gauge behind the
// CSIResizerVolumeInfeasible alert.
func (d *demo) showStuckGauge() {
	var line string
	d.poll("csi_resizer_volume_infeasible for the PVC", 30*time.Second, func() (bool, string) {
		body := scenario.Scrape(d.t, d.e.Resizer)
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, "csi_resizer_volume_infeasible{") && strings.Contains(l, `persistentvolumeclaim="`+claim+`"`) && strings.HasSuffix(l, " 1") {
				line = l
				return true, ""
			}
		}
		return false, "no csi_resizer_volume_infeasible sample of 1 for the PVC"
	})
	say("")
	say("csi-resizer's /metrics now lists the stuck PVC (alert CSIResizerVolumeInfeasible fires on it after 15m):")
	say("  %s", line)
}

// metrics prints the resizer's csi_resizer_* samples (histogram buckets and the many series
// still at 0 left out: every label value is pre-created, and the error series alone are dozens).
func (d *demo) metrics() {
	t := d.t
	say("")
	say("Metrics: csi_resizer_* on http://%s/metrics (histogram buckets and series at 0 left out)", d.e.Resizer.HTTPAddr)
	say("%s", strings.Repeat("-", 86))
	var body string
	d.poll("the recovery in the metrics", 30*time.Second, func() (bool, string) {
		body = scenario.Scrape(t, d.e.Resizer)
		v := scenario.MetricValue(body, "csi_resizer_volume_recovery_total", `state="success"`)
		return v >= 1, fmt.Sprintf("csi_resizer_volume_recovery_total{state=\"success\"} = %v", v)
	})
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "csi_resizer_") && !strings.Contains(line, "_bucket{") && !strings.HasSuffix(line, " 0") {
			say("  %s", line)
		}
	}
	if v := scenario.MetricValue(body, "csi_resizer_controller_expand_errors_total", `class="infeasible"`); v < 1 {
		t.Errorf("csi_resizer_controller_expand_errors_total{class=\"infeasible\"} = %v, want >= 1", v)
	}
	say("")
	say("volume_recovery_total{state=\"success\"} counts step 3, controller_expand_errors_total the")
	say("OUT_OF_RANGE of step 2 (class infeasible), state_transitions_total every state written;")
	say("volume_modifications_total counts step 4 (success) and step 5 (infeasible, then cancelled),")
	say("controller_modify_errors_total the INVALID_ARGUMENT of step 5; the expansions of step 6's")
	say("PVCs are in the operation counts and durations.")
	say("docs/metrics.md describes each metric and the alerts built on them.")
}

// keepRunning prints how to look around and blocks until a signal (or a component dies).
func (d *demo) keepRunning() {
	e := d.e
	ns := e.Namespace
	say("")
	say("Everything is still running. From another shell:")
	say("")
	say("  %s --kubeconfig %s get pvc -n %s -o yaml", d.kubectl, e.Cluster.Kubeconfig, ns)
	say("  %s --kubeconfig %s get events -n %s", d.kubectl, e.Cluster.Kubeconfig, ns)
	say("  %s --kubeconfig %s patch pvc %s -n %s --type=merge \\", d.kubectl, e.Cluster.Kubeconfig, claim, ns)
	say("      -p '{\"spec\":{\"resources\":{\"requests\":{\"storage\":\"4Gi\"}}}}'")
	say("  curl -s http://%s/metrics | grep ^csi_resizer_", e.Resizer.HTTPAddr)
	say("")
	say("  %s --kubeconfig %s patch pvc %s -n %s --type=merge \\", d.kubectl, e.Cluster.Kubeconfig, claim, ns)
	say("      -p '{\"spec\":{\"volumeAttributesClassName\":\"%s\"}}'", classGold)
	say("")
	say("  (the driver refuses anything above %s; any other request above the PVC's capacity resizes;", driverLimit)
	say("  it refuses class %s, any class without the parameter %q is applied)", classGold, refusedParam)
	d.keepRunningGitOps()
	say("")
	say("  logs:  csi-resizer              %s", e.Resizer.LogPath)
	say("         statefulset-resizer      %s", d.ctrl.LogPath)
	say("         its webhook              %s", d.wh.Process.LogPath)
	say("         mock driver              %s", e.Driver.Process.LogPath)
	say("         kube-apiserver           %s", e.Cluster.APIServer.LogPath)
	say("         kube-controller-manager  %s", e.Cluster.ControllerManager.LogPath)
	say("")
	say("Stop with Ctrl-C here (or `kill -INT %d` from another shell): that stops every process", os.Getpid())
	say("and removes the temp dirs, kubeconfig included.")

	select {
	case <-d.sig.Done():
		say("\nStopping...")
	case <-e.Resizer.Done():
		d.t.Errorf("csi-resizer exited unexpectedly; its log: %s\n%s", e.Resizer.LogPath, e.Resizer.LogTail(30))
	case <-d.ctrl.Done():
		d.t.Errorf("statefulset-resizer exited unexpectedly; its log: %s\n%s", d.ctrl.LogPath, d.ctrl.LogTail(30))
	case <-d.wh.Process.Done():
		d.t.Errorf("statefulset-resizer webhook exited unexpectedly; its log: %s\n%s", d.wh.Process.LogPath, d.wh.Process.LogTail(30))
	case <-e.Cluster.ControllerManager.Done():
		d.t.Errorf("kube-controller-manager exited unexpectedly\n%s", e.Cluster.ControllerManager.LogTail(30))
	case <-e.Driver.Process.Done():
		d.t.Errorf("the mock CSI driver exited unexpectedly\n%s", e.Driver.Process.LogTail(30))
	case <-e.Cluster.APIServer.Done():
		d.t.Errorf("kube-apiserver exited unexpectedly\n%s", e.Cluster.APIServer.LogTail(30))
	case <-e.Cluster.Etcd.Done():
		d.t.Errorf("etcd exited unexpectedly\n%s", e.Cluster.Etcd.LogTail(30))
	}
}

func (d *demo) header(n int, title string) {
	say("")
	say("")
	head := fmt.Sprintf("Step %d of 6: %s ", n, title)
	say("%s%s", head, strings.Repeat("-", max(3, 86-len(head))))
}

// setRequest changes the request with the harness's kubectl, prints what the resizer writes
// to the PVC (from a watch) and what the driver received, until done holds.
func (d *demo) setRequest(size string, done func(*v1.PersistentVolumeClaim) (bool, string)) *v1.PersistentVolumeClaim {
	t, e := d.t, d.e
	patch := fmt.Sprintf(`{"spec":{"resources":{"requests":{"storage":"%s"}}}}`, size)
	say("")
	say("You:  kubectl patch pvc %s -n %s --type=merge -p '%s'", claim, e.Namespace, patch)
	began := time.Now()
	rv, err := e.Cluster.Kubectl(t, "patch", "pvc", claim, "-n", e.Namespace, "--type=merge", "-p", patch,
		"-o", "jsonpath={.metadata.resourceVersion}")
	if err != nil {
		t.Fatalf("%v", err)
	}
	say("")
	say("csi-resizer wrote the PVC's status (as a watch on the PVC saw it):")
	pvc := d.watchClaim(strings.TrimSpace(rv), statusLine, done)
	took := time.Since(began).Round(time.Millisecond)
	say("")
	say("The CSI driver received:")
	calls := e.Driver.Calls(t, "ControllerExpandVolume")
	for _, c := range calls[d.seenCalls:] {
		result := c.CodeName
		if c.CodeName == "OK" {
			result = "OK, capacity " + bytesString(c.CapacityBytes)
		} else {
			result += ": " + c.Message
		}
		say("  ControllerExpandVolume  volume %s, required_bytes %s  ->  %s", c.VolumeID, bytesString(c.RequiredBytes), result)
	}
	if len(calls) == d.seenCalls {
		say("  (nothing)")
	}
	d.seenCalls = len(calls)
	say("")
	say("(done %s after you ran kubectl patch)", took)
	return pvc
}

// watchClaim prints every change of the PVC's status (its one-line form by line) from
// resourceVersion rv on until done holds, and returns the PVC then.
func (d *demo) watchClaim(rv string, line func(*v1.PersistentVolumeClaim) string, done func(*v1.PersistentVolumeClaim) (bool, string)) *v1.PersistentVolumeClaim {
	t, e := d.t, d.e
	ctx, cancel := context.WithTimeout(d.sig, stepTimeout)
	defer cancel()
	pvcs := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace)
	var last *v1.PersistentVolumeClaim
	lastLine := ""
	n := 0
	show := func(pvc *v1.PersistentVolumeClaim) bool {
		last = pvc
		if l := line(pvc); l != lastLine {
			n++
			say("  %d. %s", n, l)
			lastLine = l
		}
		ok, _ := done(pvc)
		return ok
	}
	for {
		w, err := pvcs.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + claim, ResourceVersion: rv})
		if err != nil {
			d.ctxDone(ctx, last, done)
			t.Fatalf("watch PVC %s: %v", claim, err)
		}
		for ev := range w.ResultChan() {
			pvc, ok := ev.Object.(*v1.PersistentVolumeClaim)
			if !ok || ev.Type == watch.Error || ev.Type == watch.Bookmark {
				continue
			}
			rv = pvc.ResourceVersion
			if show(pvc) {
				w.Stop()
				return pvc
			}
		}
		w.Stop()
		d.ctxDone(ctx, last, done)
		// The watch ended early (apiserver timeout, expired resourceVersion): read the PVC
		// and watch again from there.
		pvc, err := pvcs.Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			d.ctxDone(ctx, last, done)
			t.Fatalf("get PVC %s: %v", claim, err)
		}
		rv = pvc.ResourceVersion
		if show(pvc) {
			return pvc
		}
	}
}

// ctxDone ends the test if ctx is over: quietly on a signal, as a failure on the timeout.
func (d *demo) ctxDone(ctx context.Context, last *v1.PersistentVolumeClaim, done func(*v1.PersistentVolumeClaim) (bool, string)) {
	if ctx.Err() == nil {
		return
	}
	d.interruptedCheck()
	why := "no PVC seen"
	if last != nil {
		_, want := done(last)
		why = want + "; PVC: " + scenario.Describe(last)
	}
	d.t.Fatalf("the PVC did not get there within %v: %s", stepTimeout, why)
}

// interruptedCheck ends the test without failing it when a signal came.
func (d *demo) interruptedCheck() {
	if d.sig.Err() != nil {
		say("\nInterrupted: stopping everything.")
		d.t.SkipNow()
	}
}

// poll runs cond until it holds, failing the test after timeout; a signal ends the demo.
func (d *demo) poll(what string, timeout time.Duration, cond func() (bool, string)) {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(framework.PollInterval)
	defer tick.Stop()
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("waiting for %s: not within %v: %s", what, timeout, msg)
		}
		select {
		case <-tick.C:
		case <-d.sig.Done():
			d.interruptedCheck()
		}
	}
}

// waitEvent waits for the resizer's event with reason on the claim.
func (d *demo) waitEvent(reason string) {
	d.poll("a "+reason+" event", 30*time.Second, func() (bool, string) {
		return len(d.e.Events(d.t, claim, reason)) > 0, "no " + reason + " event yet"
	})
}

// showClaim prints the PVC, its PV's capacity and the PVC's events not shown before.
func (d *demo) showClaim(legend bool) {
	t, e := d.t, d.e
	pvc := e.PVC(t, claim)
	pv := e.PV(t, d.pvName)
	request, capacity, _ := scenario.Storage(pvc)
	alloc, state := "-", "-"
	if a, ok := pvc.Status.AllocatedResources[v1.ResourceStorage]; ok {
		alloc = a.String()
	}
	if s := scenario.State(pvc); s != "" {
		state = string(s)
	}
	pvCap := pv.Spec.Capacity[v1.ResourceStorage]
	note := func(s string) string {
		if legend {
			return s
		}
		return ""
	}
	say("")
	say("The PVC %s/%s now:", pvc.Namespace, pvc.Name)
	rows := [][2]string{
		{"request", padNote(request.String(), note("spec.resources.requests.storage: what you ask for"))},
		{"capacity", padNote(capacity.String(), note("status.capacity.storage: what the volume has"))},
		{"allocated", padNote(alloc, note("status.allocatedResources.storage: the size the resizer works towards"))},
		{"state", padNote(state, note("status.allocatedResourceStatuses.storage: where that expansion is"))},
	}
	for _, r := range rows {
		say("  %-12s %s", r[0], r[1])
	}
	if len(pvc.Status.Conditions) == 0 {
		say("  %-12s %s", "conditions", padNote("-", note("status.conditions: Resizing, ControllerResizeError, ...")))
	}
	for i, c := range pvc.Status.Conditions {
		label := ""
		if i == 0 {
			label = "conditions"
		}
		say("  %-12s %s  reason=%s  message=%q", label, c.Type, c.Reason, c.Message)
	}
	say("  %-12s %s", "PV capacity", padNote(pvCap.String(), note("the PersistentVolume's spec.capacity: what the driver reported")))
	d.printNewEvents(legend)
}

// printNewEvents prints the PVC's events not shown before (with legend: only marks them seen).
func (d *demo) printNewEvents(legend bool) {
	t, e := d.t, d.e
	evs := e.Events(t, claim, "")
	sort.SliceStable(evs, func(i, j int) bool { return eventTime(evs[i]).Before(eventTime(evs[j])) })
	var fresh []v1.Event
	for _, ev := range evs {
		key := string(ev.UID)
		if n, ok := d.seenEvents[key]; ok && n == ev.Count {
			continue
		}
		d.seenEvents[key] = ev.Count
		fresh = append(fresh, ev)
	}
	if legend {
		return
	}
	say("")
	say("New events of the PVC (kubectl get events -n %s --field-selector involvedObject.name=%s):", e.Namespace, claim)
	if len(fresh) == 0 {
		say("  (none)")
	}
	for _, ev := range fresh {
		count := ""
		if ev.Count > 1 {
			count = fmt.Sprintf(" (x%d)", ev.Count)
		}
		say("  %-7s  %-22s  %s%s", ev.Type, ev.Reason, ev.Message, count)
	}
}

func padNote(value, note string) string {
	if note == "" {
		return value
	}
	return fmt.Sprintf("%-7s %s", value, note)
}

// statusLine is the one-line form of what the resizer writes: capacity, allocated size,
// state and conditions.
func statusLine(pvc *v1.PersistentVolumeClaim) string {
	_, capacity, _ := scenario.Storage(pvc)
	alloc, state := "-", "-"
	if a, ok := pvc.Status.AllocatedResources[v1.ResourceStorage]; ok {
		alloc = a.String()
	}
	if s := scenario.State(pvc); s != "" {
		state = string(s)
	}
	conds := "-"
	var cs []string
	for _, c := range pvc.Status.Conditions {
		s := string(c.Type)
		if c.Reason != "" {
			s += "(" + c.Reason + ")"
		}
		cs = append(cs, s)
	}
	if len(cs) > 0 {
		conds = strings.Join(cs, ",")
	}
	return fmt.Sprintf("capacity=%s allocated=%s state=%s conditions=%s", capacity.String(), alloc, state, conds)
}

func eventTime(ev v1.Event) time.Time {
	for _, ts := range []time.Time{ev.LastTimestamp.Time, ev.EventTime.Time, ev.FirstTimestamp.Time, ev.CreationTimestamp.Time} {
		if !ts.IsZero() {
			return ts
		}
	}
	return time.Time{}
}

func bytesString(b int64) string {
	return resource.NewQuantity(b, resource.BinarySI).String()
}

func since(t time.Time) string {
	return time.Since(t).Round(100 * time.Millisecond).String()
}
