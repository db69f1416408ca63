package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/connection"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	compmetrics "k8s.io/component-base/metrics"

	"github.com/csi-resizer/csi-resizer/pkg/controller"
	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/internal/csitest"
	"github.com/csi-resizer/csi-resizer/pkg/internal/kubetest"
	"github.com/csi-resizer/csi-resizer/pkg/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/status"
)

const (
	ns = "default"
	// waitLimit bounds every wait for something that should happen promptly.
	waitLimit = 10 * time.Second
)

// setup describes one controller under test.
type setup struct {
	driver      csitest.Options
	legacy      bool
	handleInUse bool
	noAnnotate  bool
	retryStart  time.Duration
	retryMax    time.Duration
	callTimeout time.Duration
	workers     int
	watchDelay  time.Duration
	kubeOptions []kubetest.Option
	// wrapExpander, when set, stands between the controller and the CSI client.
	wrapExpander    func(csi.Expander) csi.Expander
	objects         []runtime.Object
	responses       []csitest.Response
	defaultResponse *csitest.Response
}

// env is a running controller: informers over the fake clientset, the CSI driver on a real
// unix socket, events and metrics (the registry holds the recorder's metrics and the
// scrape-time state collector, as in the sidecar).
type env struct {
	t      *testing.T
	setup  setup
	kube   *kubetest.Clientset
	csi    *csitest.Server
	events *kubetest.Recorder
	reg    compmetrics.KubeRegistry
	ctrl   *controller.Controller
	work   *controller.WorkTracker
	driver csi.Driver
	// startCaps is the number of ControllerGetCapabilities calls made by the handshake.
	startCaps int
	// stop stops the controller and its informers and waits for them (once; also at cleanup).
	stop func()
}

func start(t *testing.T, s setup) *env {
	t.Helper()
	s = s.withDefaults()
	srv := csitest.Start(t, s.driver)
	srv.Queue(s.responses...)
	if s.defaultResponse != nil {
		srv.SetDefault(*s.defaultResponse)
	}
	kube := kubetest.NewClientset(s.objects, append(s.kubeOptions, kubetest.WithWatchDelay(s.watchDelay))...)
	return run(t, s, kube, srv)
}

// restart stops the controller and starts a new one, as a restarted sidecar: new informers,
// memory, events and metrics registry, over the same API objects and the same driver.
func (e *env) restart() *env {
	e.t.Helper()
	e.stop()
	return run(e.t, e.setup, e.kube, e.csi)
}

func (s setup) withDefaults() setup {
	if s.driver == (csitest.Options{}) {
		s.driver = csitest.ControllerDriver()
	}
	if s.retryStart == 0 {
		s.retryStart = 50 * time.Millisecond
	}
	if s.retryMax == 0 {
		s.retryMax = time.Minute
	}
	if s.callTimeout == 0 {
		s.callTimeout = 10 * time.Second
	}
	if s.workers == 0 {
		s.workers = 4
	}
	return s
}

// run starts a controller over kube and the driver srv.
func run(t *testing.T, s setup, kube *kubetest.Clientset, srv *csitest.Server) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	// Not pkg/csi.Connect: that one exits the process when the connection is lost.
	conn, err := connection.Connect(ctx, srv.Address(), nil, connection.WithTimeout(waitLimit))
	if err != nil {
		cancel()
		t.Fatalf("connecting to the CSI driver: %v", err)
	}
	driver, err := csi.Handshake(ctx, conn, waitLimit)
	if err != nil {
		cancel()
		_ = conn.Close()
		t.Fatalf("handshake: %v", err)
	}

	factory := informers.NewSharedInformerFactory(kube, 0)
	pvcs := factory.Core().V1().PersistentVolumeClaims()
	pvs := factory.Core().V1().PersistentVolumes()
	rec := metrics.NewRecorder(driver.Name)
	reg := compmetrics.NewKubeRegistry()
	rec.Register(reg)
	events := &kubetest.Recorder{}
	var expander csi.Expander = csi.NewClient(conn, s.callTimeout)
	if s.wrapExpander != nil {
		expander = s.wrapExpander(expander)
	}
	ctrl := controller.New(controller.Config{
		Driver:             driver,
		Expander:           expander,
		Client:             kube,
		Writer:             &status.APIWriter{Client: kube, FieldManager: "csi-resizer"},
		Recorder:           events,
		Metrics:            rec,
		RetryIntervalStart: s.retryStart,
		RetryIntervalMax:   s.retryMax,
		HandleVolumeInUse:  s.handleInUse,
		Legacy:             s.legacy,
		AnnotateFsResize:   !s.noAnnotate,
	}, pvcs, pvs)
	work := controller.TrackWork(ctrl)
	reg.CustomMustRegister(metrics.NewStateCollector(driver.Name, ctrl.ClaimStates))
	startCaps := srv.Count(csitest.MethodControllerGetCapabilities)
	factory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- ctrl.Run(ctx, s.workers) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("controller: %v", err)
				}
			case <-time.After(waitLimit):
				t.Errorf("the controller did not stop within %s", waitLimit)
			}
			factory.Shutdown()
			_ = conn.Close()
		})
	}
	t.Cleanup(stop)
	return &env{t: t, setup: s, kube: kube, csi: srv, events: events, reg: reg, ctrl: ctrl, work: work, driver: driver,
		startCaps: startCaps, stop: stop}
}

// claim returns a bound PVC asking for request with status.capacity capacity, and its PV.
func claim(name, request, capacity string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(request)}},
			VolumeName:  "pv-" + name,
		},
		Status: v1.PersistentVolumeClaimStatus{
			Phase:       v1.ClaimBound,
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse(capacity)},
		},
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse(capacity)},
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: "csitest.example.com", VolumeHandle: "vol-" + name, FSType: "ext4",
			}},
			ClaimRef: &v1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: pvc.UID},
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.VolumeBound},
	}
	return pvc, pv
}

func objects(objs ...runtime.Object) []runtime.Object { return objs }

func (e *env) pvc(name string) *v1.PersistentVolumeClaim {
	e.t.Helper()
	obj, err := e.kube.Get(kubetest.PVCs, ns, name)
	if err != nil {
		e.t.Fatalf("getting PVC %s: %v", name, err)
	}
	return obj.(*v1.PersistentVolumeClaim)
}

func (e *env) pv(name string) *v1.PersistentVolume {
	e.t.Helper()
	obj, err := e.kube.Get(kubetest.PVs, "", name)
	if err != nil {
		e.t.Fatalf("getting PV %s: %v", name, err)
	}
	return obj.(*v1.PersistentVolume)
}

// setRequest changes the PVC's requested size, as a user would.
func (e *env) setRequest(name, size string) {
	e.t.Helper()
	err := e.kube.Mutate(kubetest.PVCs, ns, name, func(o runtime.Object) {
		o.(*v1.PersistentVolumeClaim).Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(size)
	})
	if err != nil {
		e.t.Fatalf("changing the request of %s: %v", name, err)
	}
}

// waitFor polls cond until it holds; it fails the test with cond's last explanation after
// waitLimit.
func (e *env) waitFor(what string, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		ok, why := cond()
		if ok {
			return
		}
		select {
		case <-poll.C:
		case <-deadline.C:
			e.t.Fatalf("waited %s for %s: %s", waitLimit, what, why)
		}
	}
}

// waitForClaim waits until the stored PVC satisfies cond.
func (e *env) waitForClaim(name, what string, cond func(*v1.PersistentVolumeClaim) bool) *v1.PersistentVolumeClaim {
	e.t.Helper()
	var pvc *v1.PersistentVolumeClaim
	e.waitFor(fmt.Sprintf("PVC %s: %s", name, what), func() (bool, string) {
		pvc = e.pvc(name)
		return cond(pvc), describe(pvc)
	})
	return pvc
}

// waitForEvent waits for an event with reason.
func (e *env) waitForEvent(reason string) kubetest.Event {
	e.t.Helper()
	var ev kubetest.Event
	e.waitFor("event "+reason, func() (bool, string) {
		for _, x := range e.events.Events() {
			if x.Reason == reason {
				ev = x
				return true, ""
			}
		}
		return false, fmt.Sprintf("events so far: %v", e.events.Reasons())
	})
	return ev
}

// quiet waits for window on a timer: used only to show that something does NOT happen.
func quiet(window time.Duration) { <-time.After(window) }

// ref names a stored object a test touched: a PVC of namespace ns, or a PV.
type ref struct {
	pv   bool
	name string
}

func claimRef(name string) ref  { return ref{name: name} }
func volumeRef(name string) ref { return ref{pv: true, name: name} }

func (r ref) String() string {
	if r.pv {
		return "PV " + r.name
	}
	return "PVC " + ns + "/" + r.name
}

// stored is the resourceVersion the fake apiserver holds for r.
func (e *env) stored(r ref) string {
	e.t.Helper()
	if r.pv {
		return e.pv(r.name).ResourceVersion
	}
	return e.pvc(r.name).ResourceVersion
}

// handled is the resourceVersion of r's last event the controller's handlers dealt with.
func (e *env) handled(r ref) string {
	if r.pv {
		return e.work.HandledVolume(r.name)
	}
	return e.work.HandledClaim(ns, r.name)
}

// waitSeen waits until the controller's handlers have dealt with the stored version of every
// object in refs (which implies its informer cache holds it).
func (e *env) waitSeen(refs ...ref) {
	e.t.Helper()
	e.waitFor("the controller to see the stored versions", func() (bool, string) {
		for _, r := range refs {
			if have, want := e.handled(r), e.stored(r); have != want {
				return false, fmt.Sprintf("%s: handled resourceVersion %q, stored %q", r, have, want)
			}
		}
		return true, ""
	})
}

// settle waits until the controller has nothing left to do with the objects in refs, so that a
// test can then assert what did NOT happen (no second driver call, no write or event for its
// own echoes) without a timer. Settled is, read in this order:
//  1. the handlers have dealt with the stored version of every object in refs (every write
//     was seen, and whatever its event queued is in the queue),
//  2. no key is queued or being processed, and no delayed add is due within waitLimit (a
//     later one, like the slow retry of an infeasible PVC, cannot run before the assertions
//     that follow),
//  3. the stored versions are still those of step 1: no write landed in between.
//
// With nothing queued or running, only a new event could start work, and every write's event
// was handled by step 1 and its work finished by step 2: nothing more happens unless the test
// changes something.
func (e *env) settle(refs ...ref) {
	e.t.Helper()
	e.waitFor("the controller to settle", func() (bool, string) {
		versions := make([]string, len(refs))
		for i, r := range refs {
			versions[i] = e.stored(r)
			if have := e.handled(r); have != versions[i] {
				return false, fmt.Sprintf("%s: handled resourceVersion %q, stored %q", r, have, versions[i])
			}
		}
		if queued, processing, next := e.work.Pending(); queued > 0 || processing > 0 || (next >= 0 && next < waitLimit) {
			return false, fmt.Sprintf("%d keys queued, %d being processed, next delayed add in %s", queued, processing, next)
		}
		for i, r := range refs {
			if now := e.stored(r); now != versions[i] {
				return false, fmt.Sprintf("%s was written meanwhile (%s -> %s)", r, versions[i], now)
			}
		}
		return true, ""
	})
}

// gauges gathers the series of the named gauges as "name{labels}" -> value.
func (e *env) gauges(names ...string) map[string]float64 {
	e.t.Helper()
	families, err := e.reg.Gather()
	if err != nil {
		e.t.Fatalf("gathering metrics: %v", err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if !slices.Contains(names, f.GetName()) {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

func (e *env) metric(name string, labels map[string]string) float64 {
	e.t.Helper()
	v, _, err := kubetest.MetricValue(e.reg, name, labels)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func state(pvc *v1.PersistentVolumeClaim) v1.ClaimResourceStatus {
	return pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
}

func allocated(pvc *v1.PersistentVolumeClaim) string {
	q, ok := pvc.Status.AllocatedResources[v1.ResourceStorage]
	if !ok {
		return "<none>"
	}
	return q.String()
}

func capacityOf(list v1.ResourceList) string {
	q, ok := list[v1.ResourceStorage]
	if !ok {
		return "<none>"
	}
	return q.String()
}

func condition(pvc *v1.PersistentVolumeClaim, t v1.PersistentVolumeClaimConditionType) *v1.PersistentVolumeClaimCondition {
	for i := range pvc.Status.Conditions {
		if pvc.Status.Conditions[i].Type == t {
			return &pvc.Status.Conditions[i]
		}
	}
	return nil
}

func describe(pvc *v1.PersistentVolumeClaim) string {
	var conds []string
	for _, c := range pvc.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s/%s(%s)", c.Type, c.Reason, c.Message))
	}
	return fmt.Sprintf("request=%s capacity=%s allocated=%s state=%q conditions=[%s]",
		capacityOf(pvc.Spec.Resources.Requests), capacityOf(pvc.Status.Capacity), allocated(pvc), state(pvc), strings.Join(conds, " "))
}

func bytesOf(s string) int64 {
	q := resource.MustParse(s)
	return q.Value()
}
