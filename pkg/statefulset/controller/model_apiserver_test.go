package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clienttesting "k8s.io/client-go/testing"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
)

// This file is the apiserver of the interleaving test (interleave_test.go):
// a model of what kube-apiserver, its admission chain, the garbage collector
// and the StatefulSet controller do with one StatefulSet, its pod, its
// ControllerRevision, its PVC and the re-create records, precise where the
// re-create depends on it (finalizers and deletionTimestamp, propagation
// policies and how a second delete changes them, preconditions, dry-run
// creates, no finalizer added to a terminating object, the garbage
// collector's order: dependents first, its finalizer last). The controller
// under test talks to it through client-go's fake clientset, whose reactors
// call the methods below; users, the garbage collector and the StatefulSet
// controller call them directly.

const (
	installA = "ssr-system" // the install under test: its namespace holds its records
	installB = "ssr-two"    // a second install, in another namespace
	byUser   = "user"
)

// deletedAt is the deletionTimestamp the model gives: time plays no part.
var deletedAt = metav1.Unix(1000, 0)

// world is one state of the model: what the apiserver stores, the
// environment, and ghost variables that remember what users asked for and
// were told, for the invariants. It is a plain value: clone copies it, key
// names it.
type world struct {
	STS      *appsv1.StatefulSet          `json:"sts,omitempty"`
	Records  map[string]*corev1.ConfigMap `json:"records,omitempty"` // by namespace/name
	Pod      *corev1.Pod                  `json:"pod,omitempty"`
	Revision *appsv1.ControllerRevision   `json:"revision,omitempty"`
	// Late is a revision the StatefulSet controller created for the old
	// object while it was being deleted, after the garbage collector's
	// graph was read (the race of lateRevision).
	Late     *appsv1.ControllerRevision    `json:"late,omitempty"`
	PVC      *corev1.PersistentVolumeClaim `json:"pvc"`
	NSLabels map[string]string             `json:"nsLabels,omitempty"`
	Version  int                           `json:"version"`
	UIDs     int                           `json:"uids"`
	// PodGen counts the pods the StatefulSet controller created: the
	// original is 1, a higher one means the workload was restarted from
	// nothing after its pod was deleted.
	PodGen int `json:"podGen"`

	// Environment.
	WebhookDown   bool `json:"webhookDown,omitempty"`
	RefuseCreates bool `json:"refuseCreates,omitempty"`
	// Guards: the shipped admission configuration is installed (the
	// ValidatingAdmissionPolicy that refuses other clients' deletes and
	// opt-outs of a StatefulSet being re-created, and the webhook entry with
	// failurePolicy Fail for StatefulSets with a pending change).
	Guards bool `json:"guards,omitempty"`

	// Ghosts.
	UserDeleted bool `json:"userDeleted,omitempty"`
	// UserDeleteUntraceable: the user's delete was accepted but left
	// nothing that tells it from the re-create's own delete: no controller
	// can see it (see userDelete).
	UserDeleteUntraceable bool            `json:"userDeleteUntraceable,omitempty"`
	IntentSize            string          `json:"intentSize"`
	IntentReplicas        int32           `json:"intentReplicas"`
	IntentOptOut          bool            `json:"intentOptOut,omitempty"`
	Taken                 map[string]bool `json:"taken,omitempty"`
	Violation             string          `json:"violation,omitempty"`
}

func initialWorld(guards bool) *world {
	w := &world{NSLabels: map[string]string{desired.OptInLabel: desired.OptInValue}, Version: 10, UIDs: 1, PodGen: 1,
		Guards: guards, IntentSize: "1Gi", IntentReplicas: 1, Taken: map[string]bool{}, Records: map[string]*corev1.ConfigMap{}}
	w.STS = statefulSet("uid-1", 1, appsv1.ParallelPodManagement, "1Gi")
	w.STS.ResourceVersion = "1"
	w.Pod = pod("uid-1", 0)
	w.Pod.ResourceVersion = "2"
	w.Revision = &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: revision, ResourceVersion: "3", Labels: map[string]string{"app": "web"},
			OwnerReferences: w.Pod.OwnerReferences},
		Revision: 1,
	}
	w.PVC = pvc(0, "1Gi")
	w.PVC.ResourceVersion = "4"
	return w
}

func (w *world) clone() *world {
	c := *w
	c.STS, c.Pod, c.Revision, c.Late, c.PVC = w.STS.DeepCopy(), w.Pod.DeepCopy(), w.Revision.DeepCopy(), w.Late.DeepCopy(), w.PVC.DeepCopy()
	c.Records = make(map[string]*corev1.ConfigMap, len(w.Records))
	for k, cm := range w.Records {
		c.Records[k] = cm.DeepCopy()
	}
	c.NSLabels, c.Taken = maps.Clone(w.NSLabels), maps.Clone(w.Taken)
	if c.Taken == nil {
		c.Taken = map[string]bool{}
	}
	return &c
}

// key names the state for the search: resourceVersions are renumbered in
// order (only their order and equality matter to anyone) and the counter
// that makes them left out.
func (w *world) key() string {
	c := w.clone()
	var rvs []int
	each := func(f func(*string)) {
		if c.STS != nil {
			f(&c.STS.ResourceVersion)
		}
		if c.Pod != nil {
			f(&c.Pod.ResourceVersion)
		}
		if c.Revision != nil {
			f(&c.Revision.ResourceVersion)
		}
		if c.Late != nil {
			f(&c.Late.ResourceVersion)
		}
		f(&c.PVC.ResourceVersion)
		keys := mapsKeys(c.Records)
		slices.Sort(keys)
		for _, k := range keys {
			f(&c.Records[k].ResourceVersion)
			if v, ok := c.Records[k].Data["resourceVersion"]; ok {
				f(&v)
				c.Records[k].Data["resourceVersion"] = v
			}
		}
	}
	each(func(s *string) {
		if n, err := strconv.Atoi(*s); err == nil {
			rvs = append(rvs, n)
		}
	})
	sort.Ints(rvs)
	rank := map[string]string{}
	for i, n := range rvs {
		rank[strconv.Itoa(n)] = "r" + strconv.Itoa(i)
	}
	each(func(s *string) {
		if r, ok := rank[*s]; ok {
			*s = r
		}
	})
	c.Version = 0
	b, _ := json.Marshal(c)
	return string(b)
}

func mapsKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (w *world) nextVersion() string {
	w.Version++
	return strconv.Itoa(w.Version)
}

func (w *world) violate(format string, args ...any) {
	if w.Violation == "" {
		w.Violation = fmt.Sprintf(format, args...)
	}
}

var (
	gvrSTS = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	gvrCM  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// ---- StatefulSets ----

func (w *world) getSTS(name string) (*appsv1.StatefulSet, error) {
	if w.STS == nil || w.STS.Name != name {
		return nil, apierrors.NewNotFound(gvrSTS.GroupResource(), name)
	}
	return w.STS.DeepCopy(), nil
}

// validateCreate is the part of StatefulSet validation and admission the
// re-create meets: a volume claim template's class must be a valid name
// (the apiserver validates templates on create, not on update), and
// admission may refuse any create (a quota, a policy).
func (w *world) validateCreate(obj *appsv1.StatefulSet) error {
	for i, t := range obj.Spec.VolumeClaimTemplates {
		if c := t.Spec.VolumeAttributesClassName; c != nil {
			if msgs := apivalidation.NameIsDNSSubdomain(*c, false); len(msgs) > 0 {
				path := field.NewPath("spec", "volumeClaimTemplates").Index(i).Child("spec", "volumeAttributesClassName")
				return apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "StatefulSet"}, obj.Name,
					field.ErrorList{field.Invalid(path, *c, msgs[0])})
			}
		}
	}
	if w.RefuseCreates {
		return apierrors.NewForbidden(gvrSTS.GroupResource(), obj.Name, errors.New("admission refuses StatefulSet creates"))
	}
	return nil
}

func (w *world) createSTS(who string, obj *appsv1.StatefulSet, dryRun bool) (*appsv1.StatefulSet, error) {
	if err := w.validateCreate(obj); err != nil {
		return nil, err
	}
	if w.STS != nil {
		return nil, apierrors.NewAlreadyExists(gvrSTS.GroupResource(), obj.Name)
	}
	if dryRun {
		return obj.DeepCopy(), nil
	}
	if who != byUser && w.userDeleteCounts() {
		w.violate("I2: %s created StatefulSet %s again after a user deleted it", who, obj.Name)
	}
	w.UIDs++
	created := obj.DeepCopy()
	created.UID = typesUID("uid-" + strconv.Itoa(w.UIDs))
	created.ResourceVersion = w.nextVersion()
	created.Generation = 1
	created.Status = appsv1.StatefulSetStatus{ObservedGeneration: 1, CurrentRevision: revision, UpdateRevision: revision}
	w.STS = created
	return created.DeepCopy(), nil
}

// writeSTS stores next as an update of the stored object: a new
// resourceVersion, the generation raised when the spec changed, no finalizer
// added to a terminating object, and the object removed by the write that
// takes its last finalizer.
func (w *world) writeSTS(next *appsv1.StatefulSet) (*appsv1.StatefulSet, error) {
	cur := w.STS
	if cur.DeletionTimestamp != nil {
		for _, f := range next.Finalizers {
			if !slices.Contains(cur.Finalizers, f) {
				return nil, apierrors.NewForbidden(gvrSTS.GroupResource(), cur.Name, fmt.Errorf("no new finalizers can be added if the object is being deleted, found new finalizers %q", f))
			}
		}
	}
	next.UID, next.DeletionTimestamp, next.Generation = cur.UID, cur.DeletionTimestamp, cur.Generation
	if !jsonEqual(cur.Spec, next.Spec) {
		next.Generation++
	}
	next.ResourceVersion = w.nextVersion()
	if next.DeletionTimestamp != nil && len(next.Finalizers) == 0 {
		w.STS = nil
		return next.DeepCopy(), nil
	}
	w.STS = next
	return next.DeepCopy(), nil
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func (w *world) patchSTS(who, name string, patch []byte) (*appsv1.StatefulSet, error) {
	cur, err := w.getSTS(name)
	if err != nil {
		return nil, err
	}
	var body struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &body); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if rv := body.Metadata.ResourceVersion; rv != "" && rv != cur.ResourceVersion {
		return nil, apierrors.NewConflict(gvrSTS.GroupResource(), name, errors.New("the object has been modified"))
	}
	old, _ := json.Marshal(cur)
	patched, err := jsonpatch.MergePatch(old, patch)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	next := &appsv1.StatefulSet{}
	if err := json.Unmarshal(patched, next); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	w.checkOwnership(who, cur, next)
	return w.writeSTS(next)
}

// checkOwnership is I6: an install never takes the re-create's finalizer
// off a StatefulSet whose re-create another install's record holds.
func (w *world) checkOwnership(who string, cur, next *appsv1.StatefulSet) {
	if who == byUser || !recreate.HasFinalizer(cur) || recreate.HasFinalizer(next) {
		return
	}
	for _, other := range []string{installA, installB} {
		if other != who && w.Records[other+"/"+recreate.RecordName(ns, cur.Name)] != nil {
			w.violate("I6: install %s removed the re-create finalizer of StatefulSet %s, whose re-create install %s holds", who, cur.Name, other)
		}
	}
}

// gcFinalizers is the finalizer list a delete with policy leaves: the
// garbage collector's finalizers replaced by the policy's (none for
// background); without a policy an existing one stays, else background.
func gcFinalizers(current []string, policy *metav1.DeletionPropagation) []string {
	orphan := slices.Contains(current, metav1.FinalizerOrphanDependents)
	foreground := slices.Contains(current, metav1.FinalizerDeleteDependents)
	if policy != nil {
		orphan = *policy == metav1.DeletePropagationOrphan
		foreground = *policy == metav1.DeletePropagationForeground
	}
	var out []string
	for _, f := range current {
		if f != metav1.FinalizerOrphanDependents && f != metav1.FinalizerDeleteDependents {
			out = append(out, f)
		}
	}
	if orphan {
		out = append(out, metav1.FinalizerOrphanDependents)
	}
	if foreground {
		out = append(out, metav1.FinalizerDeleteDependents)
	}
	return out
}

// deleteSTS is the apiserver's delete; changed says whether it changed what
// is stored (a second delete with the same finalizers changes nothing).
func (w *world) deleteSTS(who, name string, opts metav1.DeleteOptions) (changed bool, err error) {
	cur, err := w.getSTS(name)
	if err != nil {
		return false, err
	}
	if p := opts.Preconditions; p != nil && (p.UID != nil && *p.UID != cur.UID || p.ResourceVersion != nil && *p.ResourceVersion != cur.ResourceVersion) {
		return false, apierrors.NewConflict(gvrSTS.GroupResource(), name, errors.New("precondition failed"))
	}
	if who != byUser {
		w.checkDelete(who, cur)
	}
	finalizers := gcFinalizers(cur.Finalizers, opts.PropagationPolicy)
	if cur.DeletionTimestamp != nil && slices.Equal(finalizers, cur.Finalizers) {
		return false, nil
	}
	if len(finalizers) == 0 {
		w.STS = nil
		return true, nil
	}
	if cur.DeletionTimestamp == nil {
		cur.Generation++
	}
	cur.DeletionTimestamp, cur.Finalizers = &deletedAt, finalizers
	cur.ResourceVersion = w.nextVersion()
	w.STS = cur
	return true, nil
}

// checkDelete is I3: an install deletes a StatefulSet only while its record
// holds the replacement, and only when the create of that replacement would
// be accepted now.
func (w *world) checkDelete(who string, cur *appsv1.StatefulSet) {
	cm := w.Records[who+"/"+recreate.RecordName(ns, cur.Name)]
	if cm == nil {
		w.violate("I3: install %s deleted StatefulSet %s with no record of it stored", who, cur.Name)
		return
	}
	rec, err := recreate.Parse(cm)
	if err != nil || rec.OldUID != cur.UID {
		w.violate("I3: install %s deleted StatefulSet %s while its record does not hold it (%v)", who, cur.Name, err)
		return
	}
	probe := w.clone()
	probe.STS = nil
	if _, err := probe.createSTS(who, rec.Object, true); err != nil {
		w.violate("I3: install %s deleted StatefulSet %s although the create of its replacement is refused: %v", who, cur.Name, err)
	}
}

// ---- records ----

func (w *world) getCM(namespace, name string) (*corev1.ConfigMap, error) {
	cm := w.Records[namespace+"/"+name]
	if cm == nil {
		return nil, apierrors.NewNotFound(gvrCM.GroupResource(), name)
	}
	return cm.DeepCopy(), nil
}

func (w *world) createCM(who string, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	if w.Records[cm.Namespace+"/"+cm.Name] != nil {
		return nil, apierrors.NewAlreadyExists(gvrCM.GroupResource(), cm.Name)
	}
	for _, other := range []string{installA, installB} {
		if other != who && w.Records[other+"/"+cm.Name] != nil {
			w.violate("I6: install %s stored a record for StatefulSet %s while install %s re-creates it", who, cm.Name, other)
		}
	}
	w.UIDs++
	created := cm.DeepCopy()
	created.UID = typesUID("cm-" + strconv.Itoa(w.UIDs))
	created.ResourceVersion = w.nextVersion()
	w.Records[cm.Namespace+"/"+cm.Name] = created
	return created.DeepCopy(), nil
}

func (w *world) updateCM(cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	cur := w.Records[cm.Namespace+"/"+cm.Name]
	if cur == nil {
		return nil, apierrors.NewNotFound(gvrCM.GroupResource(), cm.Name)
	}
	if cm.ResourceVersion != cur.ResourceVersion {
		return nil, apierrors.NewConflict(gvrCM.GroupResource(), cm.Name, errors.New("the object has been modified"))
	}
	next := cm.DeepCopy()
	next.UID, next.ResourceVersion = cur.UID, w.nextVersion()
	w.Records[cm.Namespace+"/"+cm.Name] = next
	return next.DeepCopy(), nil
}

func (w *world) deleteCM(namespace, name string, opts metav1.DeleteOptions) error {
	cur := w.Records[namespace+"/"+name]
	if cur == nil {
		return apierrors.NewNotFound(gvrCM.GroupResource(), name)
	}
	if p := opts.Preconditions; p != nil && p.UID != nil && *p.UID != cur.UID {
		return apierrors.NewConflict(gvrCM.GroupResource(), name, errors.New("precondition failed"))
	}
	delete(w.Records, namespace+"/"+name)
	return nil
}

// ---- PVC ----

// patchPVC applies a merge patch; the resizer is instant (capacity follows
// the request), and no request ever exceeds what a user validly asked for
// (I5: a desire that did not pass validation is never acted on).
func (w *world) patchPVC(name string, patch []byte) (*corev1.PersistentVolumeClaim, error) {
	if w.PVC.Name != name {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, name)
	}
	old, _ := json.Marshal(w.PVC)
	patched, err := jsonpatch.MergePatch(old, patch)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	next := &corev1.PersistentVolumeClaim{}
	if err := json.Unmarshal(patched, next); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if c := next.Spec.VolumeAttributesClassName; c != nil && len(apivalidation.NameIsDNSSubdomain(*c, false)) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Kind: "PersistentVolumeClaim"}, name, nil)
	}
	req := next.Spec.Resources.Requests.Storage()
	if req.Cmp(resource.MustParse("2Gi")) > 0 {
		w.violate("I5: PVC %s patched to %s, which no validated change asked for", name, req)
	}
	next.ResourceVersion = w.nextVersion()
	next.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: req.DeepCopy()}
	w.PVC = next
	return next.DeepCopy(), nil
}

// ---- the fake clientset's reactor ----

// errCrashed ends a controller's sync where the test crashes it: every call
// after the budget of writes fails, so nothing more is written.
var errCrashed = errors.New("crashed")

// reactor serves the controller of install who from w; budget is how many
// writes it may still make (negative: no limit).
func (w *world) reactor(who string, budget *int) clienttesting.ReactionFunc {
	return func(action clienttesting.Action) (bool, runtime.Object, error) {
		write := action.GetVerb() != "get" && action.GetVerb() != "list" && action.GetVerb() != "watch"
		if write && action.GetResource().Resource != "events" {
			if *budget == 0 {
				return true, nil, errCrashed
			}
			if *budget > 0 {
				*budget--
			}
		}
		obj, err := w.serve(who, action)
		return true, obj, err
	}
}

func (w *world) serve(who string, action clienttesting.Action) (runtime.Object, error) {
	res := action.GetResource().Resource
	switch a := action.(type) {
	case clienttesting.GetActionImpl:
		return w.serveGet(res, a.GetNamespace(), a.GetName())
	case clienttesting.ListActionImpl:
		return w.serveList(res)
	case clienttesting.CreateActionImpl:
		return w.serveCreate(who, res, a)
	case clienttesting.UpdateActionImpl:
		if cm, ok := a.GetObject().(*corev1.ConfigMap); ok {
			return w.updateCM(cm)
		}
	case clienttesting.PatchActionImpl:
		switch res {
		case "statefulsets":
			return w.patchSTS(who, a.GetName(), a.GetPatch())
		case "persistentvolumeclaims":
			return w.patchPVC(a.GetName(), a.GetPatch())
		}
	case clienttesting.DeleteActionImpl:
		switch res {
		case "statefulsets":
			_, err := w.deleteSTS(who, a.GetName(), a.DeleteOptions)
			return nil, err
		case "configmaps":
			return nil, w.deleteCM(a.GetNamespace(), a.GetName(), a.DeleteOptions)
		}
	}
	if res == "events" {
		return nil, nil
	}
	return nil, fmt.Errorf("the model apiserver does not serve %s %s", action.GetVerb(), res)
}

func (w *world) serveGet(res, namespace, name string) (runtime.Object, error) {
	switch res {
	case "statefulsets":
		return w.getSTS(name)
	case "configmaps":
		return w.getCM(namespace, name)
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: res}, name)
}

func (w *world) serveList(res string) (runtime.Object, error) {
	switch res {
	case "pods":
		l := &corev1.PodList{}
		if w.Pod != nil {
			l.Items = append(l.Items, *w.Pod.DeepCopy())
		}
		return l, nil
	case "controllerrevisions":
		l := &appsv1.ControllerRevisionList{}
		for _, r := range []*appsv1.ControllerRevision{w.Revision, w.Late} {
			if r != nil {
				l.Items = append(l.Items, *r.DeepCopy())
			}
		}
		return l, nil
	case "leases":
		return nil, fmt.Errorf("the model apiserver serves no leases")
	}
	return nil, fmt.Errorf("the model apiserver does not list %s", res)
}

func (w *world) serveCreate(who, res string, a clienttesting.CreateActionImpl) (runtime.Object, error) {
	switch obj := a.GetObject().(type) {
	case *appsv1.StatefulSet:
		return w.createSTS(who, obj, slices.Contains(a.CreateOptions.DryRun, metav1.DryRunAll))
	case *corev1.ConfigMap:
		if obj.Namespace == "" {
			obj = obj.DeepCopy()
			obj.Namespace = a.GetNamespace()
		}
		return w.createCM(who, obj)
	}
	if res == "events" {
		return nil, nil
	}
	return nil, fmt.Errorf("the model apiserver does not create %s", res)
}
