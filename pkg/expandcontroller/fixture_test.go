package expandcontroller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	compmetrics "k8s.io/component-base/metrics"
	"k8s.io/utils/clock"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/inuse"
	"github.com/csi-resizer/csi-resizer/pkg/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/status"
)

// The unit tests drive sync(ctx, key) directly, as Kubernetes' sample-controller tests do: the
// API is client-go's fake clientset, the informer caches are filled by hand from it (catchUp,
// the informer catching up with the writes), the driver is a scripted csi.Expander and the
// clock is set by the test. What needs a real apiserver (resourceVersion guards, echoes and
// their timing, restarts) is tested in test/integration.

const (
	ns         = "default"
	driverName = "test.csi.example.com"
	retryStart = time.Second
	retryMax   = time.Minute
)

// testClock is a real clock whose Now the test sets: only the controller's decisions read it.
type testClock struct {
	clock.RealClock
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *testClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *testClock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// answer is one scripted driver answer; the zero answer grants what was asked.
type answer struct {
	bytes int64
	node  bool
	err   error
}

// driver is a scripted csi.Expander.
type driver struct {
	mu      sync.Mutex
	answers []answer
	always  *answer
	calls   []csi.ExpandRequest
}

func (d *driver) Expand(_ context.Context, req csi.ExpandRequest) (csi.ExpandResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, req)
	a := answer{}
	switch {
	case len(d.answers) > 0:
		a, d.answers = d.answers[0], d.answers[1:]
	case d.always != nil:
		a = *d.always
	}
	if a.err != nil {
		return csi.ExpandResult{}, a.err
	}
	if a.bytes == 0 {
		a.bytes = req.RequiredBytes
	}
	return csi.ExpandResult{CapacityBytes: a.bytes, NodeExpansionRequired: a.node}, nil
}

func (d *driver) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.calls)
}

// fixture is one controller over a fake API.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	ctrl   *Controller
	driver *driver
	events *record.FakeRecorder
	clock  *testClock
	reg    compmetrics.KubeRegistry
	pvcs   cache.Indexer
	pvs    cache.Indexer
}

// newFixture starts a controller; cfg sets the driver's shape and the modes (its API, driver,
// clock, events and metrics fields are the fixture's).
func newFixture(t *testing.T, cfg Config, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), client: fake.NewClientset(objs...), driver: &driver{},
		clock: &testClock{now: time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)}}
	return f.start(cfg)
}

// start (re)creates the controller over the fixture's API, driver and clock: a restart.
func (f *fixture) start(cfg Config) *fixture {
	if cfg.Driver.Name == "" {
		cfg.Driver = csi.Driver{Name: driverName, ControllerExpand: true}
	}
	cfg.RetryIntervalStart, cfg.RetryIntervalMax = retryStart, retryMax
	cfg.Expander, cfg.Client, cfg.Clock = f.driver, f.client, f.clock
	cfg.Writer = &status.APIWriter{Client: f.client, FieldManager: "test"}
	f.events = record.NewFakeRecorder(100)
	cfg.Recorder = f.events
	cfg.Metrics = metrics.NewRecorder(cfg.Driver.Name)
	f.reg = compmetrics.NewKubeRegistry()
	cfg.Metrics.Register(f.reg)
	factory := informers.NewSharedInformerFactory(f.client, 0)
	pvcs, pvs := factory.Core().V1().PersistentVolumeClaims(), factory.Core().V1().PersistentVolumes()
	f.ctrl = New(cfg, pvcs, pvs)
	ctx, cancel := context.WithCancel(context.Background())
	f.t.Cleanup(cancel)
	f.ctrl.pods = inuse.New(ctx, f.client, "", func([]string) {})
	f.pvcs, f.pvs = pvcs.Informer().GetIndexer(), pvs.Informer().GetIndexer()
	f.catchUp()
	return f
}

// catchUp fills the informer caches with what the API holds now.
func (f *fixture) catchUp() {
	f.t.Helper()
	pvcs, err := f.client.CoreV1().PersistentVolumeClaims("").List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for i := range pvcs.Items {
		_ = f.pvcs.Update(&pvcs.Items[i])
	}
	pvs, err := f.client.CoreV1().PersistentVolumes().List(f.ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	for i := range pvs.Items {
		_ = f.pvs.Update(&pvs.Items[i])
	}
}

// sync runs one sync of the PVC on the cache as it is, then lets the cache catch up with the
// API, and returns the retry delay.
func (f *fixture) sync(name string) time.Duration {
	f.t.Helper()
	wait, err := f.ctrl.sync(f.ctx, ns+"/"+name)
	if err != nil {
		f.t.Fatalf("sync %s: %v", name, err)
	}
	f.catchUp()
	return wait
}

func (f *fixture) pvc(name string) *v1.PersistentVolumeClaim {
	f.t.Helper()
	pvc, err := f.client.CoreV1().PersistentVolumeClaims(ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return pvc
}

// update changes a PVC in the API, as the user or the kubelet would.
func (f *fixture) update(name string, change func(*v1.PersistentVolumeClaim)) {
	f.t.Helper()
	pvc := f.pvc(name)
	change(pvc)
	if _, err := f.client.CoreV1().PersistentVolumeClaims(ns).Update(f.ctx, pvc, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.catchUp()
}

// drainEvents returns the events recorded since the last call.
func (f *fixture) drainEvents() []string {
	var out []string
	for {
		select {
		case e := <-f.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// eventsWith counts the events since the last drain whose text has reason.
func (f *fixture) eventsWith(reason string) int {
	n := 0
	for _, e := range f.drainEvents() {
		if strings.Contains(e, " "+reason+" ") {
			n++
		}
	}
	return n
}

// writes counts the API writes (patch, update, create) per resource since the fake started.
func (f *fixture) writes() map[string]int {
	out := map[string]int{}
	for _, a := range f.client.Actions() {
		switch a.GetVerb() {
		case "patch", "update", "create":
			out[a.GetResource().Resource+"/"+a.GetSubresource()]++
		}
	}
	return out
}

// metric returns the value of a counter, or the sample count of a histogram, with the labels.
func (f *fixture) metric(name string, labels map[string]string) float64 {
	f.t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// claim is a bound PVC of the test driver with its PV: request and capacity as given.
func claim(name, request, capacity string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	uid := types.UID("uid-" + name)
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid, ResourceVersion: "1"},
		Spec: v1.PersistentVolumeClaimSpec{
			VolumeName:  "pv-" + name,
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:   v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(request)}},
		},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse(capacity)}},
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name, ResourceVersion: "1"},
		Spec: v1.PersistentVolumeSpec{
			Capacity:               v1.ResourceList{v1.ResourceStorage: resource.MustParse(capacity)},
			AccessModes:            []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: "vol-" + name}},
			ClaimRef:               &v1.ObjectReference{Namespace: ns, Name: name, UID: uid},
		},
	}
	return pvc, pv
}

func state(pvc *v1.PersistentVolumeClaim) v1.ClaimResourceStatus {
	return pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
}

func storage(list v1.ResourceList) string {
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

func bytesOf(size string) int64 {
	q := resource.MustParse(size)
	return q.Value()
}
