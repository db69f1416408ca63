package scenario

// The statefulset-resizer's side of the scenarios: the shipped RBAC of
// deploy/kubernetes/statefulset-resizer, the binary as a separate process, StatefulSets whose
// pods and PVCs the real StatefulSet controller (kube-controller-manager) creates, PVs made in
// advance for the real PV controller to bind, and readers of what statefulset-resizer reports
// (the status annotation, events on the StatefulSet, `statefulset-resizer wait`).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/status"
	"github.com/csi-resizer/csi-resizer/test/framework"
)

// StatefulSetResizerComponent is the event source component of statefulset-resizer.
const StatefulSetResizerComponent = "statefulset-resizer"

// TemplateName is the volume claim template of the StatefulSets made by NewStatefulSet.
const TemplateName = "data"

// rbacKinds are the objects of deploy/kubernetes/statefulset-resizer that ApplyStatefulSetResizerRBAC
// applies (not the Deployments nor the Services: the tests run the binary themselves).
var rbacKinds = map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true}

// The ServiceAccounts of the shipped install: the controller's (the base) and the webhook's (the
// webhook component).
const (
	ControllerServiceAccount = "statefulset-resizer"
	WebhookServiceAccount    = "statefulset-resizer-webhook"
)

// ApplyStatefulSetResizerRBAC renders deploy/kubernetes/statefulset-resizer with its webhook
// component through a kustomization that sets the namespace ns (as a user does), applies only
// their RBAC objects and ServiceAccounts, and returns a kubeconfig of the controller's
// ServiceAccount: a process run with it has exactly the permissions the project ships. The
// webhook's is WebhookKubeconfig (StartWebhook uses it).
func ApplyStatefulSetResizerRBAC(t testing.TB, cluster *framework.Cluster, ns string) string {
	t.Helper()
	base := filepath.Join("deploy", "kubernetes", "statefulset-resizer")
	applyRBAC(t, cluster, ns, base, filepath.Join(base, "webhook"))
	return cluster.ServiceAccountKubeconfig(t, ns, ControllerServiceAccount)
}

// applyRBAC renders base (with components) in namespace ns and applies only its RBAC objects
// and ServiceAccounts; every RBAC kind must be in the render.
func applyRBAC(t testing.TB, cluster *framework.Cluster, ns, base string, components ...string) {
	t.Helper()
	rendered := renderInNamespace(t, cluster, ns, base, components...)
	var keep []string
	kinds := map[string]int{}
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered %s manifest: %v\n%s", base, err, doc)
		}
		if rbacKinds[meta.Kind] {
			keep = append(keep, doc)
			kinds[meta.Kind]++
		}
	}
	for kind := range rbacKinds {
		if kinds[kind] == 0 {
			t.Fatalf("%s renders no %s (rendered kinds: %v)", base, kind, kinds)
		}
	}
	if out, err := cluster.KubectlWithInput(t, strings.Join(keep, "\n---\n"), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the RBAC of %s: %v\n%s", base, err, out)
	}
}

// WebhookKubeconfig returns a kubeconfig of the webhook's ServiceAccount in ns (applied by
// ApplyStatefulSetResizerRBAC).
func WebhookKubeconfig(t testing.TB, cluster *framework.Cluster, ns string) string {
	t.Helper()
	return cluster.ServiceAccountKubeconfig(t, ns, WebhookServiceAccount)
}

// StartStatefulSetResizer runs the statefulset-resizer binary as a separate process with
// kubeconfig (normally from ApplyStatefulSetResizerRBAC):
//
//	--kubeconfig=<kubeconfig> --http-endpoint=127.0.0.1:<free port> -v=4
//	--leader-election-namespace=<env namespace> --recreate-record-namespace=<env namespace>
//
// followed by args, and waits until it serves /healthz. When the test ends, a log line saying
// the apiserver refused it something ("forbidden") fails the test: the shipped RBAC lacks a
// permission. (A test that provokes a forbidden answer on purpose, e.g. a ResourceQuota, must
// run the process itself.)
func (e *Env) StartStatefulSetResizer(t testing.TB, kubeconfig string, args ...string) *framework.Process {
	t.Helper()
	return e.StartStatefulSetResizers(t, kubeconfig, args)[0]
}

// StartStatefulSetResizers is StartStatefulSetResizer for several processes, one per argument
// list, all started before waiting for any: replicas that start at the same time.
func (e *Env) StartStatefulSetResizers(t testing.TB, kubeconfig string, argLists ...[]string) []*framework.Process {
	t.Helper()
	return e.startProcesses(t, "statefulset-resizer", func(addr string) []string {
		return []string{
			"--kubeconfig=" + kubeconfig,
			"--http-endpoint=" + addr,
			"-v=4",
			"--leader-election-namespace=" + e.Namespace,
			"--recreate-record-namespace=" + e.Namespace,
		}
	}, argLists)
}

// startProcesses runs one statefulset-resizer process per argument list (name, name-1, ...),
// each with first(its HTTP address) before its args, all started before waiting for any; it
// waits until each serves /healthz, and fails the test when one logs a forbidden answer.
func (e *Env) startProcesses(t testing.TB, name string, first func(addr string) []string, argLists [][]string) []*framework.Process {
	t.Helper()
	var procs []*framework.Process
	for i, args := range argLists {
		addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
		n := name
		if i > 0 {
			n = fmt.Sprintf("%s-%d", name, i)
		}
		p := framework.NewProcess(t, n, framework.BuildStatefulSetResizer(t), append(first(addr), args...)...)
		p.HTTPAddr = addr
		procs = append(procs, p)
	}
	for _, p := range procs {
		p.Start(t)
	}
	for _, p := range procs {
		p.WaitHTTP(t, "/healthz", 90*time.Second)
		e.failOnForbidden(t, p)
	}
	return procs
}

// StatefulSetOptions shape a StatefulSet made by NewStatefulSet.
type StatefulSetOptions struct {
	Name     string
	Replicas int32
	Policy   appsv1.PodManagementPolicyType
	// Size is the storage request of the template TemplateName.
	Size string
	// StorageClass of the template; default the env's (expandable) class.
	StorageClass string
	// OnDelete sets updateStrategy OnDelete: a pod template change leaves the pods at the old
	// revision until they are deleted.
	OnDelete bool
}

// NewStatefulSet returns a StatefulSet (not created) with one volume claim template
// TemplateName and a pause container that mounts it. Pods have a termination grace period of 0:
// with no kubelet to confirm a graceful stop, a deleted pod goes at once.
func (e *Env) NewStatefulSet(o StatefulSetOptions) *appsv1.StatefulSet {
	sc := o.StorageClass
	if sc == "" {
		sc = e.StorageClass
	}
	labels := map[string]string{"app": o.Name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: o.Name},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(o.Replicas),
			PodManagementPolicy: o.Policy,
			ServiceName:         o.Name,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy:      updateStrategy(o.OnDelete),
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []v1.Container{{
						Name:         "app",
						Image:        "registry.k8s.io/pause:3.10",
						VolumeMounts: []v1.VolumeMount{{Name: TemplateName, MountPath: "/data"}},
					}},
				},
			},
			VolumeClaimTemplates: []v1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: TemplateName},
				Spec: v1.PersistentVolumeClaimSpec{
					AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
					StorageClassName: ptr.To(sc),
					Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse(o.Size)}},
				},
			}},
		},
	}
}

func updateStrategy(onDelete bool) appsv1.StatefulSetUpdateStrategy {
	if onDelete {
		return appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}
	return appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
}

// ClaimName is the PVC the StatefulSet controller makes for template TemplateName and a replica.
func ClaimName(sts string, ordinal int) string {
	return fmt.Sprintf("%s-%s-%d", TemplateName, sts, ordinal)
}

// PodName is the name of a StatefulSet's pod.
func PodName(sts string, ordinal int) string { return fmt.Sprintf("%s-%d", sts, ordinal) }

// PrecreateVolumes plays the provisioner for the replicas of a StatefulSet made by
// NewStatefulSet: for each ordinal a volume of the template's size on the driver (CSI
// CreateVolume) and a PV pre-bound by claimRef (name and namespace, no UID) to the PVC the
// StatefulSet controller will create, in the template's StorageClass. The real PV controller
// then binds each PVC to its PV as soon as it appears. It returns the volume ids by PVC name.
func (e *Env) PrecreateVolumes(t testing.TB, sts *appsv1.StatefulSet) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for i := 0; i < int(*sts.Spec.Replicas); i++ {
		ids[ClaimName(sts.Name, i)] = e.PrecreateVolume(t, sts, i)
	}
	return ids
}

// PrecreateVolume is PrecreateVolumes for one ordinal (a replica added by a scale-up), at the
// template's size; it returns the volume id.
func (e *Env) PrecreateVolume(t testing.TB, sts *appsv1.StatefulSet, ordinal int) string {
	t.Helper()
	tmpl := sts.Spec.VolumeClaimTemplates[0]
	size := tmpl.Spec.Resources.Requests[v1.ResourceStorage]
	claim := ClaimName(sts.Name, ordinal)
	id, err := e.Driver.CreateVolume(e.Ctx, e.Namespace+"-"+claim, size.Value())
	if err != nil {
		t.Fatalf("creating the volume of %s: %v", claim, err)
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        e.Namespace + "-" + claim,
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": e.Driver.Name},
		},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: size.DeepCopy()},
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: e.Driver.Name, VolumeHandle: id, FSType: "ext4",
			}},
			ClaimRef:                      &v1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: e.Namespace, Name: claim},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			StorageClassName:              *tmpl.Spec.StorageClassName,
			VolumeMode:                    ptr.To(v1.PersistentVolumeFilesystem),
		},
	}
	if _, err := e.Client.CoreV1().PersistentVolumes().Create(e.Ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PV %s: %v", pv.Name, err)
	}
	return id
}

// EnsureNode creates framework.DefaultNodeName, Ready, for MarkPodRunning to bind pods to.
// framework.EnsureNode writes the status of the Node it has just created without retrying, and
// with kube-controller-manager running that write can lose a race (its TTL controller
// annotates new Nodes) and fail the test with a conflict; this retries it.
func (e *Env) EnsureNode(t testing.TB) {
	t.Helper()
	nodes := e.Client.CoreV1().Nodes()
	node, err := nodes.Get(e.Ctx, framework.DefaultNodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Create(e.Ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: framework.DefaultNodeName,
			Labels: map[string]string{"kubernetes.io/hostname": framework.DefaultNodeName}}}, metav1.CreateOptions{})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create node %s: %v", framework.DefaultNodeName, err)
	}
	capacity := v1.ResourceList{v1.ResourceCPU: resource.MustParse("8"), v1.ResourceMemory: resource.MustParse("32Gi"), v1.ResourcePods: resource.MustParse("250")}
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		node, err = nodes.Get(e.Ctx, framework.DefaultNodeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range node.Status.Conditions {
			if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
				return true, ""
			}
		}
		now := metav1.Now()
		node.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			Message: "faked by the test", LastHeartbeatTime: now, LastTransitionTime: now}}
		node.Status.Capacity, node.Status.Allocatable = capacity, capacity
		_, err = nodes.UpdateStatus(e.Ctx, node, metav1.UpdateOptions{})
		return false, fmt.Sprintf("node %s status: %v", framework.DefaultNodeName, err)
	})
}

// CreateStatefulSet pre-creates the volumes of sts, creates it, and marks the pods of the given
// ordinals Running as the StatefulSet controller creates them (all ordinals when none are
// given; with OrderedReady the controller creates pod i+1 only once pod i is Running and Ready,
// so only a prefix of the ordinals makes sense there). It waits until every replica's PVC is
// Bound and returns the volume ids by PVC name.
func (e *Env) CreateStatefulSet(t testing.TB, sts *appsv1.StatefulSet, running ...int) map[string]string {
	t.Helper()
	e.EnsureNode(t)
	ids := e.PrecreateVolumes(t, sts)
	if _, err := e.Client.AppsV1().StatefulSets(e.Namespace).Create(e.Ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create StatefulSet %s: %v", sts.Name, err)
	}
	if running == nil {
		for i := 0; i < int(*sts.Spec.Replicas); i++ {
			running = append(running, i)
		}
	}
	for _, i := range running {
		e.RunPod(t, sts.Name, i)
	}
	for i := 0; i < int(*sts.Spec.Replicas); i++ {
		e.WaitClaim(t, ClaimName(sts.Name, i), time.Minute, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
			return pvc.Status.Phase == v1.ClaimBound, "want Bound (by the PV controller), phase " + string(pvc.Status.Phase)
		})
	}
	return ids
}

// RunPod waits until the StatefulSet controller has created the pod of the ordinal (a new one,
// not terminating) and marks it Running: it plays the scheduler and the kubelet.
func (e *Env) RunPod(t testing.TB, sts string, ordinal int) *v1.Pod {
	t.Helper()
	name := PodName(sts, ordinal)
	var pod *v1.Pod
	framework.Eventually(t, time.Minute, func() (bool, string) {
		p, err := e.Client.CoreV1().Pods(e.Namespace).Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, fmt.Sprintf("pod %s: %v", name, err)
		}
		if p.DeletionTimestamp != nil {
			return false, fmt.Sprintf("pod %s is terminating; waiting for its successor", name)
		}
		pod = p
		return true, ""
	})
	if pod.Status.Phase == v1.PodRunning {
		return pod
	}
	return framework.MarkPodRunning(t, e.Ctx, e.Client, pod)
}

// DeleteStatefulSetPod deletes a StatefulSet's pod at once (grace period 0) and waits until it is
// gone, by UID: the StatefulSet controller may re-create a pod of the same name before a check
// by name ever sees it missing (framework.DeletePod waits by name and can time out on that).
func (e *Env) DeleteStatefulSetPod(t testing.TB, name string) {
	t.Helper()
	pods := e.Client.CoreV1().Pods(e.Namespace)
	old, err := pods.Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	if err := pods.Delete(e.Ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete pod %s: %v", name, err)
	}
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		cur, err := pods.Get(e.Ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != old.UID) {
			return true, ""
		}
		return false, fmt.Sprintf("pod %s (uid %s) still exists (err=%v)", name, old.UID, err)
	})
}

// Pod reads a pod.
func (e *Env) Pod(t testing.TB, name string) *v1.Pod {
	t.Helper()
	pod, err := e.Client.CoreV1().Pods(e.Namespace).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s: %v", name, err)
	}
	return pod
}

// StatefulSet reads a StatefulSet and its status annotation: nil when absent, and nil when the
// annotation was written for another object (status.ErrOtherObject: a re-created StatefulSet
// carrying its predecessor's document, see RecreateStatefulSetFromExport), which says nothing
// about this one until statefulset-resizer rewrites it. An annotation that cannot be decoded
// fails the test: statefulset-resizer never writes one.
func (e *Env) StatefulSet(t testing.TB, name string) (*appsv1.StatefulSet, *status.VolumeClaimTemplates) {
	t.Helper()
	sts, err := e.Client.AppsV1().StatefulSets(e.Namespace).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get StatefulSet %s: %v", name, err)
	}
	st, err := status.FromStatefulSet(sts)
	if errors.Is(err, status.ErrOtherObject) {
		return sts, nil
	}
	if err != nil {
		t.Fatalf("StatefulSet %s: %v", name, err)
	}
	return sts, st
}

// WaitTemplateStatus polls the StatefulSet until cond holds for the status of TemplateName in
// an annotation written for the StatefulSet's current generation, and returns both.
func (e *Env) WaitTemplateStatus(t testing.TB, name string, timeout time.Duration, cond func(sts *appsv1.StatefulSet, ts status.Template) (bool, string)) (*appsv1.StatefulSet, status.Template) {
	t.Helper()
	var gotSTS *appsv1.StatefulSet
	var got status.Template
	framework.Eventually(t, timeout, func() (bool, string) {
		sts, err := e.Client.AppsV1().StatefulSets(e.Namespace).Get(e.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		st, err := status.FromStatefulSet(sts)
		switch {
		case err != nil:
			// Including status.ErrOtherObject: a document copied from a replaced object is
			// not this object's status; statefulset-resizer rewrites it, so keep polling.
			return false, err.Error()
		case st == nil:
			return false, "no status annotation yet"
		case st.ObservedGeneration != sts.Generation:
			return false, fmt.Sprintf("status for generation %d, StatefulSet at %d: %s", st.ObservedGeneration, sts.Generation, sts.Annotations[status.Annotation])
		}
		ts := st.Template(TemplateName)
		if ts == nil {
			return false, "no status of template " + TemplateName
		}
		gotSTS, got = sts, *ts
		ok, why := cond(sts, *ts)
		return ok, fmt.Sprintf("%s; generation %d, status %+v; PVCs: %s", why, sts.Generation, *ts, e.describeClaims(sts))
	})
	return gotSTS, got
}

func (e *Env) describeClaims(sts *appsv1.StatefulSet) string {
	var out []string
	for i := 0; i < int(*sts.Spec.Replicas); i++ {
		pvc, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).Get(e.Ctx, ClaimName(sts.Name, i), metav1.GetOptions{})
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		out = append(out, pvc.Name+" "+Describe(pvc))
	}
	return strings.Join(out, " | ")
}

// Finished is a WaitTemplateStatus condition: every replica ready and the template finished
// for the StatefulSet's generation, nothing infeasible.
func Finished(sts *appsv1.StatefulSet, ts status.Template) (bool, string) {
	return ts.ReadyReplicas == *sts.Spec.Replicas && ts.FinishedReconciliationGeneration == sts.Generation && ts.InfeasibleReplicas == 0,
		"want every replica ready and finishedReconciliationGeneration = generation"
}

// StatefulSetEvents lists the events statefulset-resizer recorded on the StatefulSet, with the
// given reason ("" = all).
func (e *Env) StatefulSetEvents(t testing.TB, name, reason string) []v1.Event {
	t.Helper()
	return e.eventsOn(t, "StatefulSet", name, reason, func(ev *v1.Event) bool {
		return ev.Source.Component == StatefulSetResizerComponent
	})
}

// WaitStatefulSetEvent polls until statefulset-resizer has recorded an event with reason on the
// StatefulSet whose message contains every one of parts, and returns it.
func (e *Env) WaitStatefulSetEvent(t testing.TB, name, reason string, timeout time.Duration, parts ...string) v1.Event {
	t.Helper()
	var got v1.Event
	framework.Eventually(t, timeout, func() (bool, string) {
		for _, ev := range e.StatefulSetEvents(t, name, reason) {
			if containsAll(ev.Message, parts) {
				got = ev
				return true, ""
			}
		}
		return false, fmt.Sprintf("no %s event containing %q on StatefulSet %s; events: %s", reason, parts, name, reasons(e.StatefulSetEvents(t, name, "")))
	})
	return got
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// RecreateStatefulSet changes a StatefulSet the way docs/statefulset-resizer.md tells users to
// on an apiserver that refuses volumeClaimTemplates changes: `kubectl delete --cascade=orphan`
// (waiting until the garbage collector has orphaned the pods and the object is gone), then a
// new object from the old spec changed by mutate, as `kubectl apply` of the edited manifest
// would create it (labels, no annotations: a manifest kept in a repository). It returns the
// new object.
func (e *Env) RecreateStatefulSet(t testing.TB, name string, mutate func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	t.Helper()
	return e.recreateStatefulSet(t, name, false, mutate)
}

// RecreateStatefulSetFromExport is RecreateStatefulSet from a manifest exported from the
// cluster (`kubectl get -o yaml`, edit, delete --cascade=orphan, apply): the new object also
// carries the old one's annotations, among them statefulset-resizer's status annotation written
// for the old object (its uid) — at generation 1 like the new object, and possibly "finished".
func (e *Env) RecreateStatefulSetFromExport(t testing.TB, name string, mutate func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	t.Helper()
	return e.recreateStatefulSet(t, name, true, mutate)
}

func (e *Env) recreateStatefulSet(t testing.TB, name string, keepAnnotations bool, mutate func(*appsv1.StatefulSet)) *appsv1.StatefulSet {
	t.Helper()
	sets := e.Client.AppsV1().StatefulSets(e.Namespace)
	old, err := sets.Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get StatefulSet %s: %v", name, err)
	}
	if err := sets.Delete(e.Ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationOrphan)}); err != nil {
		t.Fatalf("delete StatefulSet %s --cascade=orphan: %v", name, err)
	}
	framework.Eventually(t, time.Minute, func() (bool, string) {
		_, err := sets.Get(e.Ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("StatefulSet %s still there (err=%v)", name, err)
	})
	fresh := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: name, Labels: old.Labels},
		Spec:       *old.Spec.DeepCopy(),
	}
	if keepAnnotations {
		// What an export keeps of metadata besides name and labels; uid, resourceVersion,
		// generation and the like are what a user strips (the apiserver refuses to create an
		// object with a resourceVersion).
		fresh.Annotations = old.Annotations
	}
	mutate(fresh)
	created, err := sets.Create(e.Ctx, fresh, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("re-create StatefulSet %s: %v", name, err)
	}
	return created
}

// WithSize sets the storage request of the template TemplateName.
func WithSize(size string) func(*appsv1.StatefulSet) {
	return func(sts *appsv1.StatefulSet) {
		sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse(size)
	}
}

// Request returns a PVC's storage request as a string, e.g. "2Gi".
func Request(pvc *v1.PersistentVolumeClaim) string {
	q := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	return q.String()
}

// ClaimRequests returns the requests of the StatefulSet's PVCs in ordinal order.
func (e *Env) ClaimRequests(t testing.TB, sts string, replicas int) []string {
	t.Helper()
	var out []string
	for i := 0; i < replicas; i++ {
		out = append(out, Request(e.PVC(t, ClaimName(sts, i))))
	}
	return out
}

// PatchPod applies a merge patch to a pod.
func (e *Env) PatchPod(t testing.TB, name, patch string) {
	t.Helper()
	if _, err := e.Client.CoreV1().Pods(e.Namespace).Patch(e.Ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch pod %s with %s: %v", name, patch, err)
	}
}

// WaitResult is how `statefulset-resizer wait` ended.
type WaitResult struct {
	Code           int
	Stdout, Stderr string
	Took           time.Duration
	// Ended is when the process had exited.
	Ended time.Time
}

func (r WaitResult) String() string {
	return fmt.Sprintf("exit %d after %s; stdout: %q; stderr: %q", r.Code, r.Took.Round(time.Millisecond), r.Stdout, r.Stderr)
}

// Wait runs `statefulset-resizer wait <namespace>/<name> --kubeconfig <kubeconfig>
// --interval 500ms` followed by args (e.g. --timeout) and returns how it ended. It fails the
// test if the command does not end within 5 minutes.
func (e *Env) Wait(t testing.TB, kubeconfig, name string, args ...string) WaitResult {
	t.Helper()
	return e.StartWait(t, kubeconfig, name, args...).Result(t)
}

// RunningWait is a `statefulset-resizer wait` started by StartWait.
type RunningWait struct {
	args   []string
	done   chan struct{}
	result WaitResult
	err    error
}

// StartWait starts what Wait runs, in the background, so that a test can act and observe while
// the command waits.
func (e *Env) StartWait(t testing.TB, kubeconfig, name string, args ...string) *RunningWait {
	t.Helper()
	bin := framework.BuildStatefulSetResizer(t)
	w := &RunningWait{
		args: append([]string{"wait", e.Namespace + "/" + name, "--kubeconfig", kubeconfig, "--interval", "500ms"}, args...),
		done: make(chan struct{}),
	}
	ctx, cancel := context.WithTimeout(e.Ctx, 5*time.Minute)
	cmd := exec.CommandContext(ctx, bin, w.args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("statefulset-resizer %s: %v", strings.Join(w.args, " "), err)
	}
	// The goroutine only records the outcome: the test fails (if it must) in Result, on the
	// test's goroutine. A test that ends without calling Result kills the command (e.Ctx).
	go func() {
		defer close(w.done)
		defer cancel()
		err := cmd.Wait()
		w.result = WaitResult{Stdout: stdout.String(), Stderr: stderr.String(), Took: time.Since(start), Ended: time.Now()}
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit) && exit.ExitCode() >= 0:
			w.result.Code = exit.ExitCode()
		default:
			w.err = err
		}
	}()
	return w
}

// Exited reports whether the command has ended, without waiting.
func (w *RunningWait) Exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Result waits until the command has ended and returns how.
func (w *RunningWait) Result(t testing.TB) WaitResult {
	t.Helper()
	<-w.done
	if w.err != nil {
		t.Fatalf("statefulset-resizer %s: %v (%s)", strings.Join(w.args, " "), w.err, w.result)
	}
	return w.result
}

// APIServerRequests returns kube-apiserver's apiserver_request_total summed over the samples
// whose labels contain every one of labels (`verb="PATCH"`, `resource="persistentvolumeclaims"`,
// ...): a count of requests of every client, read as admin.
func (e *Env) APIServerRequests(t testing.TB, labels ...string) float64 {
	t.Helper()
	body, err := e.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(e.Ctx)
	if err != nil {
		t.Fatalf("kube-apiserver /metrics: %v", err)
	}
	return MetricValue(string(body), "apiserver_request_total", labels...)
}

// WatchStatefulSet starts recording the versions of the StatefulSet name after resourceVersion
// rv (its current one when rv is ""), across a re-create: a re-created object is a version
// with another uid.
func (e *Env) WatchStatefulSet(t testing.TB, name, rv string) *History[*appsv1.StatefulSet] {
	t.Helper()
	if rv == "" {
		sts, _ := e.StatefulSet(t, name)
		rv = sts.ResourceVersion
	}
	sets := e.Client.AppsV1().StatefulSets(e.Namespace)
	describe := func(sts *appsv1.StatefulSet) string {
		q := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage]
		return fmt.Sprintf("StatefulSet %s: uid=%s template=%s annotations=%v", sts.Name, sts.UID, q.String(), sts.Annotations)
	}
	return watchHistory(t, e, rv, describe, func(rv string) (watch.Interface, error) {
		return sets.Watch(e.Ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
	})
}
