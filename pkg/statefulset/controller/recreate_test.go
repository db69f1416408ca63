package controller

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

var stsResource = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}

// stepFamily is the metric of the step a re-create is in.
const stepFamily = "statefulset_resizer_recreate_step_start_timestamp_seconds"

// deletions makes the fake clientset write StatefulSets as the apiserver
// does where the re-create depends on it: a delete checks its preconditions
// and, for an object with finalizers, only marks it terminating (orphan
// propagation adds the orphan finalizer, which the test's garbage collector
// removes); a merge patch checks the resourceVersion it carries; every write
// gets a new resourceVersion; a terminating object is removed by the write
// that takes its last finalizer. The fake does none of this by itself.
type deletions struct {
	h       *harness
	mu      sync.Mutex
	version int
	deletes []metav1.DeleteOptions
}

func newDeletions(h *harness) *deletions {
	d := &deletions{h: h, version: 100}
	h.client.PrependReactor("delete", "statefulsets", d.delete)
	h.client.PrependReactor("patch", "statefulsets", d.patch)
	return d
}

func (d *deletions) get(name string) (*appsv1.StatefulSet, error) {
	obj, err := d.h.client.Tracker().Get(stsResource, ns, name)
	if err != nil {
		return nil, err
	}
	return obj.(*appsv1.StatefulSet), nil
}

// write stores sts with a new resourceVersion, or removes it when it is
// terminating without finalizers.
func (d *deletions) write(sts *appsv1.StatefulSet) (runtime.Object, error) {
	d.version++
	sts.ResourceVersion = strconv.Itoa(d.version)
	if sts.DeletionTimestamp != nil && len(sts.Finalizers) == 0 {
		return sts, d.h.client.Tracker().Delete(stsResource, ns, sts.Name)
	}
	return sts, d.h.client.Tracker().Update(stsResource, sts, ns)
}

func (d *deletions) delete(action clienttesting.Action) (bool, runtime.Object, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	del := action.(clienttesting.DeleteActionImpl)
	d.deletes = append(d.deletes, del.DeleteOptions)
	cur, err := d.get(del.Name)
	if err != nil {
		return true, nil, err
	}
	if p := del.DeleteOptions.Preconditions; p != nil && (p.UID != nil && *p.UID != cur.UID || p.ResourceVersion != nil && *p.ResourceVersion != cur.ResourceVersion) {
		return true, nil, apierrors.NewConflict(stsResource.GroupResource(), del.Name, nil)
	}
	cur = cur.DeepCopy()
	if pp := del.DeleteOptions.PropagationPolicy; pp != nil && *pp == metav1.DeletePropagationOrphan {
		cur.Finalizers = append(cur.Finalizers, metav1.FinalizerOrphanDependents)
	}
	now := metav1.Now()
	cur.DeletionTimestamp = &now
	cur.Generation++ // as the apiserver does when it sets deletionTimestamp; the StatefulSet controller never observes it
	obj, err := d.write(cur)
	return true, obj, err
}

func (d *deletions) patch(action clienttesting.Action) (bool, runtime.Object, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := action.(clienttesting.PatchActionImpl)
	if p.GetPatchType() != types.MergePatchType {
		return false, nil, nil
	}
	cur, err := d.get(p.Name)
	if err != nil {
		return true, nil, err
	}
	var body struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(p.Patch, &body); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	if rv := body.Metadata.ResourceVersion; rv != "" && rv != cur.ResourceVersion {
		return true, nil, apierrors.NewConflict(stsResource.GroupResource(), p.Name, nil)
	}
	old, _ := json.Marshal(cur)
	patched, err := jsonpatch.MergePatch(old, p.Patch)
	if err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	next := &appsv1.StatefulSet{}
	if err := json.Unmarshal(patched, next); err != nil {
		return true, nil, apierrors.NewBadRequest(err.Error())
	}
	obj, err := d.write(next)
	return true, obj, err
}

// edit changes the stored object as a person would, with a new version.
func (d *deletions) edit(name string, mutate func(*appsv1.StatefulSet)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, err := d.get(name)
	if err != nil {
		d.h.t.Fatal(err)
	}
	cur = cur.DeepCopy()
	mutate(cur)
	if _, err := d.write(cur); err != nil {
		d.h.t.Fatal(err)
	}
}

// collectGarbage plays the garbage collector's part of an orphan delete: it
// takes the owner references to the object off its pods, then the orphan
// finalizer off the object.
func (d *deletions) collectGarbage(name string) {
	cur, err := d.get(name)
	if err != nil {
		d.h.t.Fatal(err)
	}
	pods, err := d.h.client.CoreV1().Pods(ns).List(d.h.ctx, metav1.ListOptions{})
	if err != nil {
		d.h.t.Fatal(err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; len(p.OwnerReferences) > 0 && p.OwnerReferences[0].UID == cur.UID {
			p.OwnerReferences = nil
			newVersion(p)
			if _, err := d.h.client.CoreV1().Pods(ns).Update(d.h.ctx, p, metav1.UpdateOptions{}); err != nil {
				d.h.t.Fatal(err)
			}
		}
	}
	d.edit(name, func(s *appsv1.StatefulSet) {
		var kept []string
		for _, f := range s.Finalizers {
			if f != metav1.FinalizerOrphanDependents {
				kept = append(kept, f)
			}
		}
		s.Finalizers = kept
	})
}

// The re-create with workers on the fake clientset, starting as soon as the
// desire is recorded (the PVCs are still at 1Gi): the finalizer is added and
// the record written in statefulset-resizer's namespace, the object deleted
// with orphan propagation and preconditions; while the garbage collector has
// not run, an edit to the terminating object (a pod template annotation) is
// accepted; once the dependents are orphaned, the record is brought up to
// date and the finalizer released, and the object is created with the
// desired template, the edit, no annotation and no finalizer; the record
// goes; Recreating and Recreated are told. (The real apiserver's part is
// tested in test/integration.)
func TestRecreateAtOnceKeepsEditsMadeWhileTerminating(t *testing.T) {
	objects := withDesire(cluster(2, appsv1.ParallelPodManagement, "1Gi", "1Gi"), `[{"name":"data","storage":"2Gi"}]`)
	h := newHarnessWith(t, Options{Recreate: true}, objects...)
	d := newDeletions(h)
	h.run()
	h.eventually("the old object terminating, with the record stored", func() bool {
		s, err := d.get("web")
		_, recErr := h.client.CoreV1().ConfigMaps(recordNS).Get(h.ctx, recreate.RecordName(ns, "web"), metav1.GetOptions{})
		return err == nil && s.DeletionTimestamp != nil && recErr == nil
	})
	if n := len(h.actions("patch", "persistentvolumeclaims")); n != 0 {
		t.Errorf("%d PVC patches before the re-create, want none: the re-create comes first", n)
	}
	h.eventually("the step exported while the garbage collector has not run", func() bool {
		return h.series(stepFamily) == `namespace="ns",statefulset="web",step="WaitForDeletion"`
	})
	if old, err := d.get("web"); err != nil {
		t.Fatal(err)
	} else if st, err := status.FromStatefulSet(old); err != nil || st == nil || st.RecreateStep == nil ||
		st.RecreateStep.Step != status.StepDeleting || !strings.Contains(st.RecreateStep.Message, recordNS+"/"+recreate.RecordName(ns, "web")) {
		t.Errorf("status of the terminating object %+v (%v), want step Deleting naming the record", st, err)
	}
	d.mu.Lock()
	o := d.deletes[0]
	d.mu.Unlock()
	if o.PropagationPolicy == nil || *o.PropagationPolicy != metav1.DeletePropagationOrphan || o.Preconditions == nil ||
		o.Preconditions.UID == nil || o.Preconditions.ResourceVersion == nil {
		t.Errorf("delete without orphan propagation and uid + resourceVersion preconditions: %+v", o)
	}
	d.edit("web", func(s *appsv1.StatefulSet) {
		s.Spec.Template.Annotations = map[string]string{"restartedAt": "while-terminating"}
	})
	d.collectGarbage("web")

	var created *appsv1.StatefulSet
	h.eventually("re-created with the desired template and the edit, and finished", func() bool {
		s, err := d.get("web")
		if err != nil || s.UID == "uid-1" || recreate.HasFinalizer(s) {
			return false // Finish takes the finalizer off last
		}
		created = s
		_, recErr := h.client.CoreV1().ConfigMaps(recordNS).Get(h.ctx, recreate.RecordName(ns, "web"), metav1.GetOptions{})
		return apierrors.IsNotFound(recErr)
	})
	_, annotated := created.Annotations[desired.Annotation]
	_, recordAnnotated := created.Annotations[recreate.RecordAnnotation]
	switch {
	case created.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String() != "2Gi":
		t.Errorf("template %s, want 2Gi", created.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage())
	case created.Spec.Template.Annotations["restartedAt"] != "while-terminating":
		t.Errorf("pod template annotations %v: the edit made while terminating was lost", created.Spec.Template.Annotations)
	case annotated || recordAnnotated || len(created.Finalizers) != 0:
		t.Errorf("annotations %v finalizers %v, want neither the desire nor a finalizer", created.Annotations, created.Finalizers)
	}
	if st, err := status.FromStatefulSet(created); err != nil || st == nil || st.RecreateStep == nil ||
		st.RecreateStep.Step != status.StepRecreated || !strings.Contains(st.RecreateStep.Message, "uid-1") || st.RecreateStep.Since == "" {
		t.Errorf("status of the re-created object %+v (%v), want step Recreated for its own uid naming uid-1", st, err)
	}
	h.eventually("no step exported once re-created", func() bool { return h.series(stepFamily) == "" })
	var ev []string
	h.eventually("Recreated event", func() bool {
		ev = append(ev, h.events()...)
		return hasEvent(ev, "Normal", EventRecreated, "uid-1")
	})
	if !hasEvent(ev, "Normal", EventRecreating, "data=2Gi", recordNS) {
		t.Errorf("events %q, want Recreating naming the templates and the record", ev)
	}
	if hasEvent(ev, "Normal", EventRecreateWaiting) {
		t.Errorf("events %q: RecreateWaiting after the re-create's own delete raised the generation (issue 31, finding 7)", ev)
	}
}

// A desire withdrawn after the finalizer was added (the Store step stopped
// before the record): the finalizer is removed, nothing is deleted.
func TestRecreateAbandonedWhenTheDesireGoes(t *testing.T) {
	objects := cluster(1, appsv1.ParallelPodManagement, "1Gi", "1Gi")
	objects[0].(*appsv1.StatefulSet).Finalizers = []string{recreate.Finalizer}
	h := newHarnessWith(t, Options{Recreate: true}, objects...)
	newDeletions(h)
	if err := h.sync(); err != nil {
		t.Fatal(err)
	}
	s := h.statefulSet()
	if len(s.Finalizers) != 0 || s.DeletionTimestamp != nil || s.UID != "uid-1" {
		t.Errorf("finalizers %v, deleting %v, uid %s: want the finalizer gone and the object kept", s.Finalizers, s.DeletionTimestamp != nil, s.UID)
	}
	if n := len(h.actions("create", "configmaps")); n != 0 {
		t.Errorf("%d records written", n)
	}
}

// Records are read only in statefulset-resizer's own namespace: a record
// ConfigMap in the StatefulSet's namespace (anyone who may create ConfigMaps
// there can write one) is not acted on, and a record there for a StatefulSet
// that does not exist creates nothing.
func TestRecordsOnlyFromOwnNamespace(t *testing.T) {
	objects := cluster(1, appsv1.ParallelPodManagement, "1Gi", "1Gi")
	forged, err := recreate.Build(statefulSet("uid-1", 1, appsv1.ParallelPodManagement, "5Gi"), statefulSet("", 1, "", "5Gi").Spec.VolumeClaimTemplates, ns)
	if err != nil {
		t.Fatal(err)
	}
	other := statefulSet("uid-9", 1, appsv1.ParallelPodManagement, "1Gi")
	other.Name = "evil"
	forgedCreate, err := recreate.Build(other, other.Spec.VolumeClaimTemplates, ns)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarnessWith(t, Options{Recreate: true}, append(objects, forged, forgedCreate)...)
	h.run()
	h.eventually("status written", func() bool { return h.status() != nil })
	for _, key := range []string{ns + "/web", ns + "/evil"} {
		h.ctrl.queue.Add(key)
	}
	h.eventually("queue drained", func() bool { return h.ctrl.queue.Len() == 0 })
	if n := len(h.actions("delete", "statefulsets")) + len(h.actions("create", "statefulsets")); n != 0 {
		t.Errorf("%d StatefulSet deletes or creates from forged records, want none", n)
	}
	for _, a := range h.client.Actions() {
		if a.GetResource().Resource == "configmaps" && a.GetNamespace() != recordNS {
			t.Errorf("%s of configmaps in namespace %q: only %s is statefulset-resizer's", a.GetVerb(), a.GetNamespace(), recordNS)
		}
	}
}

// A re-create that a partitioned rollout would be disturbed by waits, and says why once: the
// PVCs follow the desire meanwhile (rule 7), the status announces the re-create, and nothing is
// deleted.
func TestRecreateWaitsForAPartitionedRollout(t *testing.T) {
	objects := withDesire(cluster(1, appsv1.ParallelPodManagement, "1Gi", "1Gi"), `[{"name":"data","storage":"2Gi"}]`)
	sts := objects[0].(*appsv1.StatefulSet)
	sts.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](1)}}
	sts.Status.CurrentRevision = "web-rev0"
	h := newHarnessWith(t, Options{Recreate: true}, objects...)
	for range 2 {
		if err := h.sync(); err != nil {
			t.Fatal(err)
		}
		h.catchUp()
	}
	if got := storageOf(h.pvc("data-web-0")); got != "2Gi" {
		t.Errorf("request %s, want the desired 2Gi while the re-create waits", got)
	}
	if st := h.status(); st == nil || !st.Recreate {
		t.Errorf("status %+v, want the re-create announced", st)
	}
	if n := len(h.actions("delete", "statefulsets")) + len(h.actions("create", "configmaps")); n != 0 {
		t.Errorf("%d deletes or records during a partitioned rollout", n)
	}
	if st := h.status(); st == nil || st.RecreateStep == nil || st.RecreateStep.Step != status.StepHeldBack ||
		!strings.Contains(st.RecreateStep.Message, "partition 1") {
		t.Errorf("status %+v, want step HeldBack naming the partition", st)
	}
	ev := h.events()
	if len(ev) != 1 || !hasEvent(ev, "Normal", EventRecreateWaiting, "partition 1") {
		t.Errorf("events %q, want one RecreateWaiting naming the partition", ev)
	}
}

// A re-create whose create would be refused (a server dry run meets a quota)
// deletes nothing and adds no finalizer; it says so in a Warning
// RecreateRefused and in the status annotation (step Refused, with the
// apiserver's message), written once: a sync with nothing new writes nothing.
func TestRecreateRefusedIsInTheStatus(t *testing.T) {
	objects := withDesire(cluster(1, appsv1.ParallelPodManagement, "1Gi", "1Gi"), `[{"name":"data","storage":"2Gi"}]`)
	h := newHarnessWith(t, Options{Recreate: true}, objects...)
	h.client.PrependReactor("create", "statefulsets", func(action clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(stsResource.GroupResource(), "web", errors.New("exceeded quota: sts, requested: count/statefulsets.apps=1"))
	})
	for range 2 {
		_ = h.sync() // a refusal other than Invalid is returned, to be retried with backoff
		h.catchUp()
	}
	st := h.status()
	if st == nil || st.RecreateStep == nil || st.RecreateStep.Step != status.StepRefused ||
		!strings.Contains(st.RecreateStep.Message, "exceeded quota") || !strings.Contains(st.RecreateStep.Message, "Nothing was deleted") {
		t.Fatalf("status %+v, want step Refused with the apiserver's message", st)
	}
	writes := len(h.actions("patch", "statefulsets"))
	_ = h.sync()
	if n := len(h.actions("patch", "statefulsets")); n != writes {
		t.Errorf("%d StatefulSet patches after a sync with nothing new, want %d", n, writes)
	}
	if s := h.statefulSet(); len(s.Finalizers) != 0 || len(h.actions("delete", "statefulsets")) != 0 || len(h.actions("create", "configmaps")) != 0 {
		t.Errorf("finalizers %v, %d deletes, %d records: a refused re-create must touch nothing", s.Finalizers,
			len(h.actions("delete", "statefulsets")), len(h.actions("create", "configmaps")))
	}
	if ev := h.events(); !hasEvent(ev, "Warning", EventRecreateRefused, "exceeded quota") {
		t.Errorf("events %q, want RecreateRefused naming the quota", ev)
	}
}
