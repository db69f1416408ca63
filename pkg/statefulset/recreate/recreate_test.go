package recreate

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
)

func sts(uid string, deleting bool, finalizers ...string) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: k8stypes.UID("uid-" + uid), ResourceVersion: "7"}}
	if deleting {
		s.DeletionTimestamp = &metav1.Time{}
	}
	s.Finalizers = finalizers
	return s
}

func withRecordAnnotation(s *appsv1.StatefulSet, ref string) *appsv1.StatefulSet {
	s.Annotations = map[string]string{RecordAnnotation: ref}
	return s
}

// Every combination of what a restart can find, and the step it must take.
// "Never two objects": the old object is deleted only while the record holds
// its replacement, and a new object (another uid) is never deleted. "Never
// none": a record without a StatefulSet is always created. "Nothing lost":
// the old object goes only through Release, which records its last version.
func TestNext(t *testing.T) {
	rec := &Record{OldUID: "uid-old", OldResourceVersion: "7"}
	orphan := metav1.FinalizerOrphanDependents
	cases := []struct {
		name   string
		sts    *appsv1.StatefulSet
		record *Record
		wanted bool
		want   Step
	}{
		{"nothing exists", nil, nil, true, Nothing},
		{"not wanted", sts("old", false), nil, false, Nothing},
		{"wanted: store the record first", sts("old", false), nil, true, Store},
		{"wanted, finalizer added before a restart: store", sts("old", false, Finalizer), nil, true, Store},
		{"finalizer but no longer wanted: abandon", sts("old", false, Finalizer), nil, false, Abandon},
		{"being deleted by someone, not ours", sts("old", true, orphan), nil, true, Nothing},
		{"deleted by someone after our finalizer, before a record: abandon", sts("old", true, Finalizer), nil, true, Abandon},
		{"record, old object: killed before the delete", sts("old", false, Finalizer), rec, false, Delete},
		{"record, old object without our finalizer: Delete checks it", sts("old", false), rec, true, Delete},
		{"record, old object terminating: the garbage collector orphans", sts("old", true, Finalizer, orphan), rec, false, WaitForDeletion},
		{"record, old object terminating, dependents orphaned: release", sts("old", true, Finalizer), rec, false, Release},
		{"record, terminating, someone else's finalizer left: wait", sts("old", true, Finalizer, "example.com/keep"), rec, false, WaitForDeletion},
		{"record, terminating, our finalizer removed by a person: wait", sts("old", true, orphan), rec, false, WaitForDeletion},
		{"record, no object: killed between release and create", nil, rec, false, Create},
		{"record, new object: killed before the record was deleted", sts("new", false), rec, false, Finish},
		{"record, new object still wanting: finish first", sts("new", false), rec, true, Finish},
		{"record, new object being deleted by someone: not ours to re-create", sts("new", true), rec, false, Finish},
		{"record, new object with our finalizer deleted before Finish: Finish cancels", sts("new", true, Finalizer), rec, false, Finish},
		{"record, old object deleted in the foreground by someone: cancel", sts("old", true, Finalizer, metav1.FinalizerDeleteDependents), rec, false, Cancel},
		{"another install's re-create: leave it", withRecordAnnotation(sts("old", false, Finalizer), "ssr-two/x"), nil, true, Nothing},
		{"another install's re-create, no longer wanted: not ours to abandon", withRecordAnnotation(sts("old", true, Finalizer), "ssr-two/x"), nil, false, Nothing},
		{"this install's annotation: abandon as usual", withRecordAnnotation(sts("old", false, Finalizer), "ssr-system/x"), nil, false, Abandon},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Next(Input{StatefulSet: c.sts, Record: c.record, Wanted: c.wanted, RecordNamespace: "ssr-system"}); got != c.want {
				t.Fatalf("Next = %s, want %s", got, c.want)
			}
		})
	}
}

func template(name, size string) corev1.PersistentVolumeClaim {
	return corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{Resources: corev1.VolumeResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
}

func liveObject() *appsv1.StatefulSet {
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "web", UID: "uid-old", ResourceVersion: "42", Generation: 3,
			CreationTimestamp: metav1.Now(), Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{
				desired.Annotation: `[{"name":"data","storage":"2Gi"}]`,
				status.Annotation:  `{"observedGeneration":3}`,
				"kubectl.kubernetes.io/last-applied-configuration": "{}",
			},
			Finalizers: []string{"example.com/keep", metav1.FinalizerOrphanDependents, Finalizer},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "helm", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:replicas":{},"f:volumeClaimTemplates":{}}}`)}},
				{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:` + desired.Annotation + `":{}}}}`)}},
				{Manager: "statefulset-resizer", Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{".":{},"f:` + desired.Annotation + `":{},"f:` + status.Annotation + `":{}},"f:finalizers":{".":{},"v:\"` + Finalizer + `\"":{}}}}`)}},
			},
		},
		Spec: appsv1.StatefulSetSpec{
			Replicas:             ptr.To[int32](3),
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{template("data", "1Gi")},
		},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 3, Replicas: 3},
	}
}

// The record holds the object to create: the live one with the desired
// templates, without the annotation, identity, status and deletion
// finalizers, with managedFields kept minus the annotation; Parse gives back
// what Build stored, and the old uid and resourceVersion for the delete's
// preconditions.
func TestBuildParse(t *testing.T) {
	live := liveObject()
	before := live.DeepCopy()
	cm, err := Build(live, []corev1.PersistentVolumeClaim{template("data", "2Gi")}, "ssr-system")
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(live, before) {
		t.Fatal("Build changed its input")
	}
	if cm.Name != "statefulset-resizer-recreate-ns.web" || cm.Namespace != "ssr-system" || cm.Labels[RecordLabel] != "true" || len(cm.OwnerReferences) != 0 {
		t.Fatalf("record metadata %+v", cm.ObjectMeta)
	}
	if namespace, name, ok := StatefulSetOf(cm); !ok || namespace != "ns" || name != "web" {
		t.Fatalf("StatefulSetOf = %q, %q, %v", namespace, name, ok)
	}
	cm.UID = "cm-uid"
	rec, err := Parse(cm)
	if err != nil {
		t.Fatal(err)
	}
	if rec.OldUID != "uid-old" || rec.OldResourceVersion != "42" || rec.ConfigMapUID != "cm-uid" {
		t.Fatalf("record %+v", rec)
	}
	obj := rec.Object
	q := obj.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
	switch {
	case q.String() != "2Gi":
		t.Errorf("template %s, want 2Gi", &q)
	case obj.UID != "" || obj.ResourceVersion != "" || obj.Generation != 0 || !obj.CreationTimestamp.IsZero():
		t.Errorf("identity kept: %+v", obj.ObjectMeta)
	case obj.Status.Replicas != 0 || obj.Status.ObservedGeneration != 0:
		t.Errorf("status kept: %+v", obj.Status)
	case obj.Annotations[desired.Annotation] != "":
		t.Errorf("desired annotation kept")
	case obj.Annotations[status.Annotation] == "" || obj.Annotations["kubectl.kubernetes.io/last-applied-configuration"] == "":
		t.Errorf("other annotations lost: %v", obj.Annotations)
	case len(obj.Finalizers) != 1 || obj.Finalizers[0] != "example.com/keep":
		t.Errorf("finalizers %v, want only example.com/keep", obj.Finalizers)
	case obj.Kind != "StatefulSet" || obj.APIVersion != "apps/v1":
		t.Errorf("type %+v", obj.TypeMeta)
	}
	// managedFields: helm's untouched; the entry that owned only the
	// annotation is gone; statefulset-resizer keeps the status annotation.
	var managers []string
	for _, e := range obj.ManagedFields {
		managers = append(managers, e.Manager+"="+string(e.FieldsV1.Raw))
	}
	want := []string{
		"helm=" + `{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:replicas":{},"f:volumeClaimTemplates":{}}}`,
		"statefulset-resizer=" + `{"f:metadata":{"f:annotations":{".":{},"f:` + status.Annotation + `":{}}}}`,
	}
	if strings.Join(managers, "\n") != strings.Join(want, "\n") {
		t.Errorf("managedFields\n%s\nwant\n%s", strings.Join(managers, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseRejects(t *testing.T) {
	good, err := Build(liveObject(), []corev1.PersistentVolumeClaim{template("data", "2Gi")}, "ssr-system")
	if err != nil {
		t.Fatal(err)
	}
	other := liveObject()
	other.Name = "db"
	otherData, _ := json.Marshal(other)
	for name, mutate := range map[string]func(cm *corev1.ConfigMap){
		"not a record name": func(cm *corev1.ConfigMap) { cm.Name = "web" },
		"no namespace part": func(cm *corev1.ConfigMap) { cm.Name = RecordPrefix + "web" },
		"another namespace": func(cm *corev1.ConfigMap) { cm.Name = RecordName("other", "web") },
		"garbage":           func(cm *corev1.ConfigMap) { cm.Data["statefulset"] = "{" },
		"another object":    func(cm *corev1.ConfigMap) { cm.Data["statefulset"] = string(otherData) },
		"no old uid":        func(cm *corev1.ConfigMap) { delete(cm.Data, "uid") },
	} {
		t.Run(name, func(t *testing.T) {
			cm := good.DeepCopy()
			mutate(cm)
			if _, err := Parse(cm); err == nil || !strings.Contains(err.Error(), "record ConfigMap ssr-system/"+cm.Name) {
				t.Fatalf("Parse error %v, want one naming the ConfigMap", err)
			}
		})
	}
	long := liveObject()
	long.Name = strings.Repeat("x", 230)
	if _, err := Build(long, nil, "ssr-system"); err == nil || !strings.Contains(err.Error(), "is not valid") {
		t.Fatalf("Build of a too long name: %v", err)
	}
}

// The recorded owners come back; the create's entry goes; whoever wrote
// the new object since the create keeps what they wrote (finding 7: a write
// before Finish no longer leaves the create's owner with every field).
func TestRestoredManagedFields(t *testing.T) {
	update := metav1.ManagedFieldsOperationUpdate
	helm := metav1.ManagedFieldsEntry{Manager: "helm", Operation: update, APIVersion: "apps/v1"}
	applied := metav1.ManagedFieldsEntry{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "apps/v1"}
	created := metav1.ManagedFieldsEntry{Manager: "statefulset-resizer", Operation: update, APIVersion: "apps/v1"}
	status := metav1.ManagedFieldsEntry{Manager: "kube-controller-manager", Operation: update, APIVersion: "apps/v1", Subresource: "status"}
	helmAgain := metav1.ManagedFieldsEntry{Manager: "helm", Operation: update, APIVersion: "apps/v1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}
	recorded := []metav1.ManagedFieldsEntry{helm, applied}
	cases := []struct {
		name   string
		live   []metav1.ManagedFieldsEntry
		want   []string
		wantOK bool
	}{
		{"just created", []metav1.ManagedFieldsEntry{created}, []string{"helm", "kubectl"}, true},
		{"status written since", []metav1.ManagedFieldsEntry{created, status}, []string{"kube-controller-manager", "helm", "kubectl"}, true},
		{"another manager wrote since", []metav1.ManagedFieldsEntry{created, {Manager: "argocd", Operation: update, APIVersion: "apps/v1"}},
			[]string{"argocd", "helm", "kubectl"}, true},
		{"a recorded manager wrote since: its newer entry stays", []metav1.ManagedFieldsEntry{created, helmAgain}, []string{"helm", "kubectl"}, true},
		{"restored already", []metav1.ManagedFieldsEntry{helm, applied}, nil, false},
	}
	for _, c := range cases {
		got, ok := RestoredManagedFields(c.live, recorded, "statefulset-resizer")
		var managers []string
		for _, e := range got {
			managers = append(managers, e.Manager)
			if e.Manager == "helm" && len(c.live) > 1 && c.live[1].Manager == "helm" && e.FieldsV1 == nil {
				t.Errorf("%s: the recorded helm entry replaced the newer one", c.name)
			}
		}
		if ok != c.wantOK || strings.Join(managers, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s: %v %v, want %v %v", c.name, managers, ok, c.want, c.wantOK)
		}
	}
	if _, ok := RestoredManagedFields([]metav1.ManagedFieldsEntry{created}, nil, "statefulset-resizer"); ok {
		t.Error("restored with nothing recorded")
	}
}

func TestPending(t *testing.T) {
	live := liveObject()
	bigger := []corev1.PersistentVolumeClaim{template("data", "2Gi")}
	same := []corev1.PersistentVolumeClaim{template("data", "1Gi")}
	for _, c := range []struct {
		name      string
		enabled   bool
		templates []corev1.PersistentVolumeClaim
		want      bool
	}{
		{"desire bigger", true, bigger, true},
		{"disabled", false, bigger, false},
		{"no usable desire", true, nil, false},
		{"desire equals the templates", true, same, false},
	} {
		if got := Pending(c.enabled, live, c.templates); got != c.want {
			t.Errorf("Pending %s: %v, want %v", c.name, got, c.want)
		}
	}
}

// A re-create waits only where a new object would lose something: a
// generation the StatefulSet controller has not seen, or the current
// revision of a partitioned or OnDelete rollout.
func TestBlocked(t *testing.T) {
	rolling := func(partition *int32) appsv1.StatefulSetUpdateStrategy {
		return appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: partition}}
	}
	for _, c := range []struct {
		name       string
		generation int64
		current    string
		strategy   appsv1.StatefulSetUpdateStrategy
		want       string // part of the answer, "" for none
	}{
		{"rollout complete", 3, "r2", rolling(nil), ""},
		{"generation not observed", 4, "r2", rolling(nil), "not observed generation 4"},
		{"rolling update without partition", 3, "r1", rolling(nil), ""},
		{"rolling update, partition 0", 3, "r1", rolling(ptr.To[int32](0)), ""},
		{"rolling update with a partition", 3, "r1", rolling(ptr.To[int32](2)), "partition 2"},
		{"OnDelete rollout", 3, "r1", appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}, "OnDelete"},
		{"OnDelete, nothing to roll", 3, "r2", appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}, ""},
	} {
		s := liveObject()
		s.Generation = c.generation
		s.Spec.UpdateStrategy = c.strategy
		s.Status.CurrentRevision, s.Status.UpdateRevision = c.current, "r2"
		got := Blocked(s)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("Blocked %s = %q, want %q", c.name, got, c.want)
		}
	}
}

// UpToDate: a record is current for the version it was built from, and for
// nothing else; the managedFields' timestamps do not count.
func TestUpToDate(t *testing.T) {
	live := liveObject()
	templates := []corev1.PersistentVolumeClaim{template("data", "2Gi")}
	cm, err := Build(live, templates, "ssr-system")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := Parse(cm)
	if err != nil {
		t.Fatal(err)
	}
	later := live.DeepCopy()
	now := metav1.Now()
	later.ManagedFields[0].Time = &now
	newer := live.DeepCopy()
	newer.ResourceVersion = "44"
	newer.Status.ReadyReplicas = 3
	edited := live.DeepCopy()
	edited.Spec.Template.Annotations = map[string]string{"restartedAt": "now"}
	edited.ResourceVersion = "43"
	for _, c := range []struct {
		name      string
		live      *appsv1.StatefulSet
		templates []corev1.PersistentVolumeClaim
		want      bool
	}{
		{"same version", live, templates, true},
		{"only a managedFields time differs", later, templates, true},
		{"a newer version, same object to create", newer, templates, true},
		{"edited since", edited, templates, false},
		{"other templates", live, []corev1.PersistentVolumeClaim{template("data", "3Gi")}, false},
	} {
		got, err := UpToDate(rec, c.live, c.templates)
		if err != nil || got != c.want {
			t.Errorf("UpToDate %s = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}
