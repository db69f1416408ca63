package modifycontroller

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	testclock "k8s.io/utils/clock/testing"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/internal/conditions"
	"github.com/csi-resizer/csi-resizer/pkg/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/modify"
	csistatus "github.com/csi-resizer/csi-resizer/pkg/status"
)

// The unit tests drive sync(ctx, key) directly over client-go's fake clientset, with the
// informer caches filled from it by hand and a scripted csi.Modifier, as the expansion
// controller's do. Guards, echoes and restarts on a real apiserver are in test/integration.

const (
	ns         = "default"
	driverName = "test.csi.example.com"
	retryStart = time.Second
	retryMax   = time.Minute
)

// modifier is a scripted csi.Modifier: it answers from errs in order, then success.
type modifier struct {
	mu    sync.Mutex
	errs  []error
	calls []csi.ModifyRequest
}

func (m *modifier) Modify(_ context.Context, req csi.ModifyRequest) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls = append(m.calls, req)
	if len(m.errs) > 0 {
		err := m.errs[0]
		m.errs = m.errs[1:]
		return err
	}
	return nil
}

type fixture struct {
	t        *testing.T
	ctx      context.Context
	client   *fake.Clientset
	ctrl     *Controller
	driver   *modifier
	events   *record.FakeRecorder
	clock    *testclock.FakeClock
	indexers []cache.Indexer
}

func newFixture(t *testing.T, extraMetadata bool, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), client: fake.NewClientset(objs...), driver: &modifier{},
		clock: testclock.NewFakeClock(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC)), events: record.NewFakeRecorder(100)}
	factory := informers.NewSharedInformerFactory(f.client, 0)
	pvcs, pvs, classes := factory.Core().V1().PersistentVolumeClaims(), factory.Core().V1().PersistentVolumes(), factory.Storage().V1().VolumeAttributesClasses()
	f.ctrl = New(Config{
		Driver: csi.Driver{Name: driverName, ControllerModify: true}, Modifier: f.driver, Client: f.client,
		Writer: &csistatus.APIWriter{Client: f.client, FieldManager: "test"}, Recorder: f.events,
		Metrics: metrics.NewRecorder(driverName), Clock: f.clock,
		RetryIntervalStart: retryStart, RetryIntervalMax: retryMax, ExtraModifyMetadata: extraMetadata, CallTimeout: callTimeout,
	}, pvcs, pvs, classes)
	f.indexers = []cache.Indexer{pvcs.Informer().GetIndexer(), pvs.Informer().GetIndexer(), classes.Informer().GetIndexer()}
	f.catchUp()
	return f
}

// catchUp fills the informer caches with what the API holds now.
func (f *fixture) catchUp() {
	f.t.Helper()
	pvcs, _ := f.client.CoreV1().PersistentVolumeClaims("").List(f.ctx, metav1.ListOptions{})
	for i := range pvcs.Items {
		_ = f.indexers[0].Update(&pvcs.Items[i])
	}
	pvs, _ := f.client.CoreV1().PersistentVolumes().List(f.ctx, metav1.ListOptions{})
	for i := range pvs.Items {
		_ = f.indexers[1].Update(&pvs.Items[i])
	}
	vacs, _ := f.client.StorageV1().VolumeAttributesClasses().List(f.ctx, metav1.ListOptions{})
	for i := range vacs.Items {
		_ = f.indexers[2].Update(&vacs.Items[i])
	}
}

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
	pvc, err := f.client.CoreV1().PersistentVolumeClaims(ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return pvc
}

func (f *fixture) setClass(name, class string) {
	f.t.Helper()
	pvc := f.pvc(name)
	pvc.Spec.VolumeAttributesClassName = &class
	if _, err := f.client.CoreV1().PersistentVolumeClaims(ns).Update(f.ctx, pvc, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.catchUp()
}

// writes lists the patches sent, as "resource/subresource".
func (f *fixture) writes() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, p.GetResource().Resource+"/"+p.GetSubresource())
		}
	}
	return out
}

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

func vac(name, driver string) *storagev1.VolumeAttributesClass {
	return &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: name}, DriverName: driver, Parameters: map[string]string{"iops": name}}
}

// claim is a bound PVC of the driver with class current (and asked for).
func claim(name, current string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	size := resource.MustParse("1Gi")
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: v1.PersistentVolumeClaimSpec{VolumeName: "pv-" + name, VolumeAttributesClassName: &current,
			Resources: v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: size}}},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, CurrentVolumeAttributesClassName: &current,
			Capacity: v1.ResourceList{v1.ResourceStorage: size}},
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-" + name},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                  v1.ResourceList{v1.ResourceStorage: size},
			VolumeAttributesClassName: &current,
			ClaimRef:                  &v1.ObjectReference{Namespace: ns, Name: name, UID: pvc.UID},
			PersistentVolumeSource:    v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: "vol-" + name}},
		},
	}
	return pvc, pv
}

func modifyStatus(pvc *v1.PersistentVolumeClaim) string {
	if s := pvc.Status.ModifyVolumeStatus; s != nil {
		return string(s.Status) + "/" + s.TargetVolumeAttributesClassName
	}
	return ""
}

// TestModifySucceeds (rules 12 and 18): one call with the class's parameters, then the PV's
// class and the PVC's current class; 3 writes and 1 event.
func TestModifySucceeds(t *testing.T) {
	pvc, pv := claim("data", "silver")
	f := newFixture(t, true, pvc, pv, vac("silver", driverName), vac("gold", driverName))
	f.setClass("data", "gold")
	f.client.ClearActions()
	f.sync("data")
	if len(f.driver.calls) != 1 {
		t.Fatalf("%d calls, want 1", len(f.driver.calls))
	}
	call := f.driver.calls[0]
	if call.VolumeID != "vol-data" || call.MutableParameters["iops"] != "gold" || call.MutableParameters["csi.storage.k8s.io/pvc/name"] != "data" {
		t.Errorf("call %+v: want the volume, gold's parameters and the extra metadata", call)
	}
	got := f.pvc("data")
	if *got.Status.CurrentVolumeAttributesClassName != "gold" || got.Status.ModifyVolumeStatus != nil || len(got.Status.Conditions) != 0 {
		t.Errorf("PVC status %+v: want gold current, no modification, no conditions", got.Status)
	}
	if pv, _ := f.client.CoreV1().PersistentVolumes().Get(f.ctx, "pv-data", metav1.GetOptions{}); *pv.Spec.VolumeAttributesClassName != "gold" {
		t.Errorf("PV class %q, want gold", *pv.Spec.VolumeAttributesClassName)
	}
	if w := f.writes(); strings.Join(w, ",") != "persistentvolumeclaims/status,persistentvolumes/,persistentvolumeclaims/status" {
		t.Errorf("writes %v, want status, PV, status", w)
	}
	if ev := f.drainEvents(); len(ev) != 1 || !strings.Contains(ev[0], EventModifySuccessful) {
		t.Errorf("events %v, want one %s", ev, EventModifySuccessful)
	}
	if f.sync("data"); len(f.driver.calls) != 1 {
		t.Errorf("a sync after success called the driver again")
	}
}

// TestInfeasibleThenRetryOrNewClass (rule 16): INVALID_ARGUMENT makes the PVC Infeasible; the
// same class waits --retry-interval-max, another class goes at once.
func TestInfeasibleThenRetryOrNewClass(t *testing.T) {
	pvc, pv := claim("data", "silver")
	f := newFixture(t, false, pvc, pv, vac("silver", driverName), vac("gold", driverName), vac("bronze", driverName))
	f.setClass("data", "gold")
	f.driver.errs = []error{status.Error(codes.InvalidArgument, "iops too high")}
	if wait := f.sync("data"); wait <= retryMax-2*time.Second || wait > retryMax+time.Second {
		t.Errorf("retry after %s, want about --retry-interval-max (%s)", wait, retryMax)
	}
	if got := modifyStatus(f.pvc("data")); got != "Infeasible/gold" {
		t.Fatalf("status %q, want Infeasible/gold", got)
	}
	if ev := f.drainEvents(); len(ev) != 1 || !strings.Contains(ev[0], "InvalidArgument") {
		t.Errorf("events %v, want one failure naming the code", ev)
	}
	f.clock.Step(10 * time.Second)
	if wait := f.sync("data"); wait <= 0 || len(f.driver.calls) != 1 {
		t.Errorf("a sync within the wait: %d calls, wait %s; want no call and a wait", len(f.driver.calls), wait)
	}
	f.setClass("data", "bronze")
	f.sync("data")
	if n := len(f.driver.calls); n != 2 || f.driver.calls[1].MutableParameters["iops"] != "bronze" {
		t.Fatalf("calls %+v, want the second for bronze at once", f.driver.calls)
	}
	if got := f.pvc("data"); *got.Status.CurrentVolumeAttributesClassName != "bronze" || got.Status.ModifyVolumeStatus != nil {
		t.Errorf("status %+v, want bronze current", got.Status)
	}
}

// TestRollbackCancels (rule 17): setting the class back while Infeasible clears the
// modification without a call.
func TestRollbackCancels(t *testing.T) {
	pvc, pv := claim("data", "silver")
	f := newFixture(t, false, pvc, pv, vac("silver", driverName), vac("gold", driverName))
	f.setClass("data", "gold")
	f.driver.errs = []error{status.Error(codes.InvalidArgument, "no")}
	f.sync("data")
	f.drainEvents()
	f.setClass("data", "silver")
	f.sync("data")
	got := f.pvc("data")
	if len(f.driver.calls) != 1 || got.Status.ModifyVolumeStatus != nil || len(got.Status.Conditions) != 0 || *got.Status.CurrentVolumeAttributesClassName != "silver" {
		t.Errorf("calls %d, status %+v: want no new call, the modification and its conditions gone", len(f.driver.calls), got.Status)
	}
	if ev := f.drainEvents(); len(ev) != 1 || !strings.Contains(ev[0], EventModifyCancelled) {
		t.Errorf("events %v, want one %s", ev, EventModifyCancelled)
	}
}

// TestPendingUntilClassExists (rule 13): a missing class is Pending, once; its creation queues
// the PVC, which is then modified.
func TestPendingUntilClassExists(t *testing.T) {
	pvc, pv := claim("data", "silver")
	f := newFixture(t, false, pvc, pv, vac("silver", driverName))
	f.setClass("data", "gold")
	f.sync("data")
	f.sync("data")
	if got := modifyStatus(f.pvc("data")); got != "Pending/gold" || len(f.driver.calls) != 0 {
		t.Fatalf("status %q, %d calls; want Pending/gold and none", got, len(f.driver.calls))
	}
	if ev := f.drainEvents(); len(ev) != 1 || !strings.Contains(ev[0], "gold does not exist") {
		t.Errorf("events %v, want one naming the missing class", ev)
	}
	gold := vac("gold", driverName)
	if _, err := f.client.StorageV1().VolumeAttributesClasses().Create(f.ctx, gold, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.catchUp()
	f.ctrl.classAdded(gold)
	if f.ctrl.queue.Len() != 1 {
		t.Fatalf("the class's creation queued %d PVCs, want 1", f.ctrl.queue.Len())
	}
	f.sync("data")
	if got := f.pvc("data"); len(f.driver.calls) != 1 || *got.Status.CurrentVolumeAttributesClassName != "gold" {
		t.Errorf("%d calls, current %q; want 1 and gold", len(f.driver.calls), *got.Status.CurrentVolumeAttributesClassName)
	}
}

// TestForeignClassIsInfeasible (rule 13): a class of another driver is never sent to this one;
// the PVC is Infeasible with a ModifyVolumeError saying why (what Kubernetes' e2e suite waits
// for), once, and setting the class back cancels it.
func TestForeignClassIsInfeasible(t *testing.T) {
	pvc, pv := claim("data", "silver")
	f := newFixture(t, false, pvc, pv, vac("silver", driverName), vac("ebs-io2", "ebs.csi.aws.com"))
	f.setClass("data", "ebs-io2")
	f.sync("data")
	got := f.pvc("data")
	if s := modifyStatus(got); s != "Infeasible/ebs-io2" || len(f.driver.calls) != 0 {
		t.Errorf("status %q, %d calls; want Infeasible and no call", s, len(f.driver.calls))
	}
	c := conditions.Find(got.Status.Conditions, v1.PersistentVolumeClaimVolumeModifyVolumeError)
	if c == nil || c.Reason != modify.ReasonClassOfAnotherDriver || !strings.Contains(c.Message, "ebs.csi.aws.com") {
		t.Errorf("ModifyVolumeError %+v, want reason %s naming the class's driver", c, modify.ReasonClassOfAnotherDriver)
	}
	rv := got.ResourceVersion
	f.sync("data")
	if again := f.pvc("data"); again.ResourceVersion != rv {
		t.Errorf("a second sync wrote the PVC again (resourceVersion %s -> %s)", rv, again.ResourceVersion)
	}
	f.setClass("data", "silver")
	f.sync("data")
	if s := modifyStatus(f.pvc("data")); s != "" || len(f.driver.calls) != 0 {
		t.Errorf("after the rollback: status %q, %d calls; want none and no call", s, len(f.driver.calls))
	}
}

// TestTransientErrorKeepsTarget (rule 14): after an answer that is not final, a changed spec
// is not followed: the next call is for the same class.
func TestTransientErrorKeepsTarget(t *testing.T) {
	pvc, pv := claim("data", "silver")
	f := newFixture(t, false, pvc, pv, vac("silver", driverName), vac("gold", driverName), vac("bronze", driverName))
	f.setClass("data", "gold")
	f.driver.errs = []error{status.Error(codes.DeadlineExceeded, "slow backend")}
	wait := f.sync("data")
	f.setClass("data", "bronze")
	f.clock.Step(wait)
	f.sync("data")
	if n := len(f.driver.calls); n != 2 || f.driver.calls[1].MutableParameters["iops"] != "gold" {
		t.Fatalf("calls %+v, want the second still for gold", f.driver.calls)
	}
	f.sync("data")
	if got := f.pvc("data"); len(f.driver.calls) != 3 || *got.Status.CurrentVolumeAttributesClassName != "bronze" {
		t.Errorf("%d calls, current %q: want gold confirmed, then bronze", len(f.driver.calls), *got.Status.CurrentVolumeAttributesClassName)
	}
}

// TestIgnoresOtherClaims: PVCs of another driver or not asking for a class are not touched.
func TestIgnoresOtherClaims(t *testing.T) {
	other, otherPV := claim("other", "silver")
	otherPV.Spec.CSI.Driver = "someone.else"
	same, samePV := claim("same", "silver")
	f := newFixture(t, false, other, otherPV, same, samePV, vac("gold", driverName))
	f.setClass("other", "gold")
	f.client.ClearActions()
	for _, name := range []string{"other", "same", "missing"} {
		f.sync(name)
	}
	if len(f.driver.calls) != 0 || len(f.writes()) != 0 {
		t.Errorf("%d calls, writes %v; want none", len(f.driver.calls), f.writes())
	}
}

// callTimeout is the fixture's --modify-timeout.
const callTimeout = 30 * time.Second

// TestInFlightClassGone (rule 20): a modification whose call may still be in effect is not
// abandoned when its class disappears until that call is past its deadline; then the PVC
// records a final error saying the outcome is unknown, with no call, and the next decision
// follows the spec.
func TestInFlightClassGone(t *testing.T) {
	pvc, pv := claim("data", "silver")
	f := newFixture(t, false, pvc, pv, vac("silver", driverName), vac("gold", driverName), vac("bronze", driverName))
	f.setClass("data", "gold")
	f.driver.errs = []error{status.Error(codes.Unavailable, "backend busy")}
	f.clock.Step(f.sync("data"))
	f.drainEvents()
	if err := f.client.StorageV1().VolumeAttributesClasses().Delete(f.ctx, "gold", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.indexers[2].Delete(vac("gold", driverName))
	f.client.ClearActions()
	wait := f.sync("data")
	if got := modifyStatus(f.pvc("data")); got != "InProgress/gold" || len(f.driver.calls) != 1 || wait <= 0 || wait > callTimeout+time.Second || len(f.writes()) != 0 {
		t.Fatalf("within the call's deadline: status %q, %d calls, wait %s, writes %v; want InProgress/gold kept, no call, no write, a wait of at most the deadline",
			got, len(f.driver.calls), wait, f.writes())
	}
	f.clock.Step(wait)
	if w := f.sync("data"); w != 0 {
		t.Fatalf("past the deadline: wait %s, want the outcome recorded now", w)
	}
	got := f.pvc("data")
	c := conditions.Find(got.Status.Conditions, v1.PersistentVolumeClaimVolumeModifyVolumeError)
	if modifyStatus(got) != "InProgress/gold" || c == nil || c.Reason != modify.ReasonClassDeleted || len(f.driver.calls) != 1 {
		t.Fatalf("given up: status %q, error %+v, %d calls; want InProgress/gold with %s and no call", modifyStatus(got), c, len(f.driver.calls), modify.ReasonClassDeleted)
	}
	if ev := f.drainEvents(); len(ev) != 1 || !strings.Contains(ev[0], "gold was deleted") {
		t.Errorf("events %v, want one saying the class was deleted", ev)
	}
	// The given-up modification no longer holds the spec back: another class goes at once.
	f.setClass("data", "bronze")
	f.sync("data")
	if got := modifyStatus(f.pvc("data")); got != "" || len(f.driver.calls) != 2 || *f.pvc("data").Status.CurrentVolumeAttributesClassName != "bronze" {
		t.Errorf("after bronze asked: status %q, %d calls, want bronze current after one more call", got, len(f.driver.calls))
	}
}

// TestNoCallWithoutTheLease: a process that may have lost the Lease does not call the driver;
// the recorded target is left for the leader (docs/design.md §2.1).
func TestNoCallWithoutTheLease(t *testing.T) {
	pvc, pv := claim("data", "silver")
	f := newFixture(t, false, pvc, pv, vac("silver", driverName), vac("gold", driverName))
	f.ctrl.cfg.Leading = func() error { return errors.New("lease lost") }
	f.setClass("data", "gold")
	if _, err := f.ctrl.sync(f.ctx, ns+"/data"); err == nil || len(f.driver.calls) != 0 {
		t.Fatalf("sync error %v, %d calls; want the lease error and no call", err, len(f.driver.calls))
	}
}

// TestUnrecordedAnswerWaitsBeforeCallingAgain: when the answer of a call cannot be written, a
// sync on the PVC (the echo of the pre-call write, or another writer's version) does not call the
// driver again before --retry-interval-start (docs/design.md §2.3 rule 8; found by the soak).
func TestUnrecordedAnswerWaitsBeforeCallingAgain(t *testing.T) {
	pvc, pv := claim("data", "silver")
	f := newFixture(t, false, pvc, pv, vac("silver", driverName), vac("gold", driverName))
	f.setClass("data", "gold")
	f.driver.errs = []error{status.Error(codes.DeadlineExceeded, "slow backend")}
	patches := 0
	f.client.PrependReactor("patch", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		if patches++; patches == 2 {
			return true, nil, errors.New("apiserver restarting")
		}
		return false, nil, nil
	})
	if _, err := f.ctrl.sync(f.ctx, ns+"/data"); err == nil {
		t.Fatal("sync succeeded though the answer could not be recorded")
	}
	f.catchUp()
	touched := f.pvc("data")
	touched.ResourceVersion, touched.Labels = "another-writer", map[string]string{"touched": "yes"}
	if _, err := f.client.CoreV1().PersistentVolumeClaims(ns).Update(f.ctx, touched, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.catchUp()
	if _, err := f.ctrl.sync(f.ctx, ns+"/data"); err == nil || len(f.driver.calls) != 1 {
		t.Fatalf("sync on another writer's version: error %v, %d calls; want an error and no second call", err, len(f.driver.calls))
	}
	f.clock.Step(retryStart)
	f.sync("data")
	if n := len(f.driver.calls); n != 2 {
		t.Errorf("%d calls after --retry-interval-start, want the retry", n)
	}
}
