//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/controller"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// The findings of issue 31 on the real control plane (kube-apiserver, etcd, and
// kube-controller-manager with its garbage collector and StatefulSet controller), one test per
// finding, each asserting the behaviour the fix promises.

// untouchedStatefulSet holds for the window: the StatefulSet is the object uid, not being
// deleted, without the re-create's finalizer, and has no record.
func (s *stsEnv) untouchedStatefulSet(t *testing.T, window time.Duration, name string, uid types.UID) {
	t.Helper()
	framework.Consistently(t, window, func() (bool, string) {
		cur, err := s.Client.AppsV1().StatefulSets(s.Namespace).Get(s.Ctx, name, metav1.GetOptions{})
		switch {
		case err != nil:
			return false, fmt.Sprintf("StatefulSet %s: %v", name, err)
		case cur.UID != uid || cur.DeletionTimestamp != nil:
			return false, fmt.Sprintf("StatefulSet %s: uid %s (was %s), deleting %v: the re-create went ahead", name, cur.UID, uid, cur.DeletionTimestamp != nil)
		case recreate.HasFinalizer(cur):
			return false, fmt.Sprintf("StatefulSet %s carries the finalizer %s: %v", name, recreate.Finalizer, cur.Finalizers)
		case s.recordOf(t, name) != nil:
			return false, fmt.Sprintf("StatefulSet %s has a re-create record", name)
		}
		return true, ""
	})
}

// Finding 1: a user's `kubectl delete statefulset` (background propagation) while the old object
// waits for the garbage collector is not undone. kube-controller-manager is down (stopped, as in
// the reproduction), so the old object stays terminating with the orphan finalizer; the
// user's delete replaces the orphan propagation. statefulset-resizer sees pods still owned once
// only its finalizer is left, cancels (RecreateCancelled, record deleted, finalizer removed) and
// creates nothing; once kube-controller-manager is back, its garbage collector deletes the pods
// the old object owned, and no StatefulSet comes back. (Stopped, not frozen: a frozen garbage
// collector, thawed, still processes the orphan request it saw before the user's delete, and
// races itself orphaning some pods while deleting others; that is Kubernetes', not the test's
// subject. A restarted one starts from the objects as they are.)
func TestRecreateUserDeleteIsNotUndone(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	before := s.pods(t, "web", 2)
	kcm := s.Cluster.ControllerManager
	if err := kcm.Stop(); err != nil {
		t.Fatalf("stop kube-controller-manager: %v", err)
	}

	s.setDesire(t, "web", desire(t, "2Gi"), nil)
	s.waitTerminating(t, "web", old.UID)
	terminating, _ := s.StatefulSet(t, "web")
	if !slices.Contains(terminating.Finalizers, metav1.FinalizerOrphanDependents) || !recreate.HasFinalizer(terminating) {
		t.Fatalf("old object's finalizers %v, want %s (the garbage collector is down) and %s", terminating.Finalizers, metav1.FinalizerOrphanDependents, recreate.Finalizer)
	}
	if out, err := s.Cluster.Kubectl(t, "delete", "statefulset", "web", "-n", s.Namespace, "--wait=false"); err != nil {
		t.Fatalf("the user's kubectl delete: %v\n%s", err, out)
	}
	s.WaitStatefulSetEvent(t, "web", controller.EventRecreateCancelled, stsTimeout, "not re-created")
	sets := s.Client.AppsV1().StatefulSets(s.Namespace)
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		cur, err := sets.Get(s.Ctx, "web", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return s.recordOf(t, "web") == nil, "the StatefulSet is gone but its record is still there"
		}
		return false, fmt.Sprintf("StatefulSet web still there (%v): finalizers %v", err, cur.Finalizers)
	})

	kcm.Start(t)
	pods := s.Client.CoreV1().Pods(s.Namespace)
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		for name, id := range before {
			pod, err := pods.Get(s.Ctx, name, metav1.GetOptions{})
			if err == nil && pod.UID == id.uid && pod.DeletionTimestamp == nil {
				return false, fmt.Sprintf("pod %s (owned by the deleted uid %s) is still there: the garbage collector did not delete it", name, old.UID)
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err.Error()
			}
		}
		return true, ""
	})
	framework.Consistently(t, 5*time.Second, func() (bool, string) {
		cur, err := sets.Get(s.Ctx, "web", metav1.GetOptions{})
		if err == nil {
			return false, fmt.Sprintf("StatefulSet web exists again (uid %s): the user's delete was undone", cur.UID)
		}
		if !apierrors.IsNotFound(err) {
			return false, err.Error()
		}
		for name := range before {
			if pod, err := pods.Get(s.Ctx, name, metav1.GetOptions{}); err == nil && pod.DeletionTimestamp == nil {
				return false, fmt.Sprintf("pod %s exists again (uid %s)", name, pod.UID)
			}
		}
		return s.recordOf(t, "web") == nil, "a re-create record of web exists again"
	})
	if n := len(s.StatefulSetEvents(t, "web", controller.EventRecreated)); n != 0 {
		t.Errorf("%d Recreated events after the user's delete", n)
	}
}

// Finding 2a: a desire written by hand (`kubectl annotate`, which the webhook lets through) with
// a VolumeAttributesClass name the apiserver would refuse at create time is never acted on: it
// is told (InvalidDesiredVolumeClaimTemplates, naming the value), and nothing is deleted, grown
// or finalized; the StatefulSet keeps its uid.
func TestRecreateHandWrittenInvalidDesireIsRefused(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	ids := s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 1, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)

	value := `[{"name":"` + scenario.TemplateName + `","storage":"2Gi","volumeAttributesClassName":"Bad_Name"}]`
	for _, args := range [][]string{
		{"label", "statefulset", "web", desired.OptInLabel + "=" + desired.OptInValue},
		{"annotate", "statefulset", "web", desired.Annotation + "=" + value},
	} {
		if out, err := s.Cluster.Kubectl(t, append(args, "-n", s.Namespace)...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	s.WaitStatefulSetEvent(t, "web", controller.EventInvalidDesiredTemplates, stsTimeout, "Bad_Name")
	s.untouchedStatefulSet(t, 5*time.Second, "web", old.UID)
	s.untouched(t, time.Second, ids, map[string]string{scenario.ClaimName("web", 0): "1Gi"})
	for _, reason := range []string{controller.EventRecreating, controller.EventRecreateDeleted, controller.EventRecreateFailed} {
		if evs := s.StatefulSetEvents(t, "web", reason); len(evs) != 0 {
			t.Errorf("%d %s events for a desire that was never valid: %s", len(evs), reason, evs[0].Message)
		}
	}
}

// Finding 2b: a ResourceQuota on StatefulSets that is full refuses the create of the
// replacement; the server dry run before the finalizer shows it, so nothing is deleted (same
// uid, no finalizer, no record) and RecreateRefused names the quota. Once the quota is raised,
// the re-create completes and the pods are adopted.
func TestRecreateRefusedByQuotaDeletesNothing(t *testing.T) {
	s := startSTSEnv(t)
	const quota = "statefulsets"
	s.ExpectRefusals("exceeded quota: " + quota)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	before := s.pods(t, "web", 2)
	s.setQuota(t, quota, "1", "1")

	s.setDesire(t, "web", desire(t, "2Gi"), nil)
	s.WaitStatefulSetEvent(t, "web", controller.EventRecreateRefused, stsTimeout, "exceeded quota: "+quota, "Nothing was deleted")
	s.untouchedStatefulSet(t, 5*time.Second, "web", old.UID)

	s.setQuota(t, quota, "2", "")
	got := s.waitRecreated(t, "web", old.UID, "2Gi")
	s.checkAdopted(t, "web", before, got.UID)
	s.WaitStatefulSetEvent(t, "web", controller.EventRecreated, stsTimeout, string(old.UID))
}

// setQuota creates or updates the ResourceQuota name with count/statefulsets.apps = hard, and
// waits until kube-controller-manager's quota controller has put it in the status (the quota
// admission plugin enforces the status), with used = used when used is not "".
func (s *stsEnv) setQuota(t *testing.T, name, hard, used string) {
	t.Helper()
	const res = v1.ResourceName("count/statefulsets.apps")
	quotas := s.Client.CoreV1().ResourceQuotas(s.Namespace)
	q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name},
		Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{res: resource.MustParse(hard)}}}
	cur, err := quotas.Get(s.Ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = quotas.Create(s.Ctx, q, metav1.CreateOptions{})
	case err == nil:
		cur.Spec = q.Spec
		_, err = quotas.Update(s.Ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("set ResourceQuota %s to %s: %v", name, hard, err)
	}
	framework.Eventually(t, time.Minute, func() (bool, string) {
		cur, err := quotas.Get(s.Ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		h, u := cur.Status.Hard[res], cur.Status.Used[res]
		ok := h.String() == hard && (used == "" || u.String() == used)
		return ok, fmt.Sprintf("ResourceQuota %s status hard %s used %s; want hard %s used %q", name, &h, &u, hard, used)
	})
}

// Finding 3: a re-create interrupted after the release, as a crash leaves it (the record in
// statefulset-resizer's namespace, made with recreate.Build from the old object, and no
// StatefulSet), in a namespace whose opt-in was removed meanwhile: statefulset-resizer, started
// again, creates the StatefulSet from the record, and the pods are adopted.
func TestRecreateFinishesAfterOptOut(t *testing.T) {
	s := startSTSEnv(t)
	s.labelNamespace(t, desired.OptInValue)
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	before := s.pods(t, "web", 2)
	old, _ := s.StatefulSet(t, "web")
	if desired.OptedIn(old.Labels, nil) {
		t.Fatalf("StatefulSet labels %v: the test needs it opted in by its namespace only", old.Labels)
	}
	s.storeRecord(t, old, "2Gi")
	s.orphanDelete(t, old)
	s.labelNamespace(t, "")

	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	got := s.waitRecreated(t, "web", old.UID, "2Gi")
	s.checkAdopted(t, "web", before, got.UID)
	s.WaitStatefulSetEvent(t, "web", controller.EventRecreated, stsTimeout, string(old.UID))
	if recreate.HasFinalizer(got) || got.Annotations[recreate.RecordAnnotation] != "" {
		t.Errorf("re-created object: finalizers %v, annotation %s=%q; want neither once finished",
			got.Finalizers, recreate.RecordAnnotation, got.Annotations[recreate.RecordAnnotation])
	}
}

// labelNamespace sets the opt-in label of the test's namespace to value ("" removes it).
func (s *stsEnv) labelNamespace(t *testing.T, value string) {
	t.Helper()
	var v any
	if value != "" {
		v = value
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{desired.OptInLabel: v}}})
	if _, err := s.Client.CoreV1().Namespaces().Patch(s.Ctx, s.Namespace, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatalf("label namespace %s with %s: %v", s.Namespace, body, err)
	}
}

// Finding 5: two installs of statefulset-resizer on one cluster (each with its ServiceAccount,
// Lease and record namespace). The first one re-creates the StatefulSet; kube-controller-manager
// is frozen so that the old object waits, terminating, with the first install's finalizer and
// annotation, while the second install starts and syncs it. The second one leaves it alone (says
// so in its log), never removes the finalizer and never writes a record; once the garbage
// collector runs, the first install finishes the re-create and the pods are adopted. (Neither
// runs with leader election, so neither holds a Lease and the start-up guard lets both start;
// it is checked last, against a held Lease.)
func TestRecreateSecondInstallLeavesItAlone(t *testing.T) {
	s := startSTSEnv(t)
	second := framework.CreateNamespace(t, s.Ctx, s.Client, "ssr-second")
	secondKubeconfig := scenario.ApplyStatefulSetResizerRBAC(t, s.Cluster, second)
	// Both installs ship a ClusterRoleBinding of the same name, which the second apply pointed at
	// its own ServiceAccount: bind the first install's again under another name.
	s.bindClusterRole(t, "statefulset-resizer-"+s.Namespace, "statefulset-resizer", s.Namespace, "statefulset-resizer")
	records := s.watchRecords(t, second)

	first := s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	before := s.pods(t, "web", 2)
	thaw := s.freezeGarbageCollector(t)
	s.setDesire(t, "web", desire(t, "2Gi"), nil)
	s.waitTerminating(t, "web", old.UID)
	ref := recreate.RecordRef(s.Namespace, s.Namespace, "web")

	other := s.StartStatefulSetResizer(t, secondKubeconfig, "--leader-election-namespace="+second, "--recreate-record-namespace="+second)
	firstsKept := func() (bool, string) {
		cur, _ := s.StatefulSet(t, "web")
		return cur.UID == old.UID && recreate.HasFinalizer(cur) && cur.Annotations[recreate.RecordAnnotation] == ref,
			fmt.Sprintf("old object: uid %s (was %s), finalizers %v, %s=%q; want the first install's finalizer and annotation %q kept",
				cur.UID, old.UID, cur.Finalizers, recreate.RecordAnnotation, cur.Annotations[recreate.RecordAnnotation], ref)
	}
	// Until the second install has synced web (its log says so), or has already taken the first
	// one's finalizer or annotation off (the finding), which the check after this one reports.
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		kept, _ := firstsKept()
		return !kept || other.LogContains("Leaving the StatefulSet to the statefulset-resizer install re-creating it"),
			"want the second install to say it leaves web to the first:\n" + other.LogTail(20)
	})
	framework.Consistently(t, 5*time.Second, firstsKept)

	thaw()
	got := s.waitRecreated(t, "web", old.UID, "2Gi")
	s.checkAdopted(t, "web", before, got.UID)
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		cur, _ := s.StatefulSet(t, "web")
		return !recreate.HasFinalizer(cur) && cur.Annotations[recreate.RecordAnnotation] == "",
			fmt.Sprintf("re-created object: finalizers %v, annotations %v; want the first install to have removed both", cur.Finalizers, cur.Annotations)
	})
	for _, line := range []string{"removing the re-create finalizer", "Withdrawing the re-create", "Deleted StatefulSet with orphan propagation", "Created StatefulSet from the re-create record"} {
		if other.LogContains(line) {
			t.Errorf("the second install logged %q: it acted on the first install's re-create", line)
		}
	}
	if !first.LogContains("Created StatefulSet from the re-create record") {
		t.Errorf("the first install did not log the create:\n%s", first.LogTail(30))
	}
	if added := records(); len(added) != 0 {
		t.Errorf("the second install wrote re-create records in %s: %v", second, added)
	}

	// The start-up half: an install that may list Leases (here with the admin's credentials)
	// and finds another install's Lease held refuses to start, naming that install.
	s.holdLease(t, second)
	third := framework.CreateNamespace(t, s.Ctx, s.Client, "ssr-third")
	p := framework.NewProcess(t, "statefulset-resizer-third", framework.BuildStatefulSetResizer(t), "--kubeconfig="+s.Cluster.Kubeconfig,
		fmt.Sprintf("--http-endpoint=127.0.0.1:%d", framework.FreePort(t)), "--leader-election-namespace="+third, "--recreate-record-namespace="+third)
	p.Start(t)
	if err := p.WaitExit(time.Minute); err != nil && p.ExitCode() < 0 {
		t.Fatalf("an install started beside another: %v\n%s", err, p.LogTail(20))
	}
	if code := p.ExitCode(); code == 0 || !p.LogContains("another statefulset-resizer install runs in namespace "+second) {
		t.Errorf("an install started beside another exited %d; want non-zero and a log naming the install in %s:\n%s", code, second, p.LogTail(20))
	}
}

// holdLease writes the leader-election Lease of a statefulset-resizer install in namespace, held
// and renewed now, as a running install with --leader-election keeps it.
func (s *stsEnv) holdLease(t *testing.T, namespace string) {
	t.Helper()
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: controller.Name},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("statefulset-resizer-test-holder"), LeaseDurationSeconds: ptr.To[int32](300),
			AcquireTime: &now, RenewTime: &now}}
	if _, err := s.Client.CoordinationV1().Leases(namespace).Create(s.Ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create Lease %s/%s: %v", namespace, controller.Name, err)
	}
}

// bindClusterRole binds the ClusterRole role to the ServiceAccount namespace/account under name.
func (s *stsEnv) bindClusterRole(t *testing.T, name, role, namespace, account string) {
	t.Helper()
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: account}}}
	if _, err := s.Client.RbacV1().ClusterRoleBindings().Create(s.Ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ClusterRoleBinding %s: %v", name, err)
	}
	t.Cleanup(func() { _ = s.Client.RbacV1().ClusterRoleBindings().Delete(s.Ctx, name, metav1.DeleteOptions{}) })
}

// watchRecords watches namespace for re-create records (by their label) from now on, and
// returns the function that lists the names of those added so far.
func (s *stsEnv) watchRecords(t *testing.T, namespace string) func() []string {
	t.Helper()
	w, err := s.Client.CoreV1().ConfigMaps(namespace).Watch(s.Ctx, metav1.ListOptions{LabelSelector: recreate.RecordLabel + "=true"})
	if err != nil {
		t.Fatalf("watch records in %s: %v", namespace, err)
	}
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	var added []string
	go func() {
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*v1.ConfigMap); ok && ev.Type == watch.Added {
				mu.Lock()
				added = append(added, cm.Name)
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(added)
	}
}

// Finding 7, the record name and the events. The finding (a record name over 253 characters
// leaves a permanent finalizer) cannot happen on this apiserver: it refuses StatefulSet names over
// 63 characters (a DNS label, like namespaces), so a record name is at most
// len(RecordPrefix)+63+1+63 = 157 characters; recreate.CheckName, run before the finalizer, is
// covered by the unit tests. Here: the longest name the apiserver accepts is re-created (no
// RecreateRefused, no finalizer left); and a normal re-create tells each step (Recreating,
// RecreateDeleted, RecreateReleased, Recreated) and never RecreateWaiting (its own orphan delete
// raises the generation, which the StatefulSet controller never observes). With the garbage
// collector this quick no sync sees the terminating object, so the old code passes the last check
// here too; TestRecreateAtOnceKeepsEditsMadeWhileTerminating (the unit test, whose garbage
// collector waits) is the one that fails on it.
func TestRecreateLongestNameAndStepEvents(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	long := "long-" + strings.Repeat("x", 63-len("long-"))
	if _, err := s.Client.AppsV1().StatefulSets(s.Namespace).Create(s.Ctx, s.NewStatefulSet(scenario.StatefulSetOptions{Name: long + "x", Replicas: 0,
		Policy: appsv1.ParallelPodManagement, Size: "1Gi"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsInvalid(err) {
		t.Fatalf("dry-run create of a StatefulSet with a 64-character name: %v; want Invalid (the record name bound assumes names of at most 63)", err)
	}
	if err := recreate.CheckName(strings.Repeat("n", 63), long); err != nil {
		t.Fatalf("the longest namespace and StatefulSet names: %v", err)
	}
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: long, Replicas: 0, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 1, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	oldLong, _ := s.WaitTemplateStatus(t, long, stsTimeout, scenario.Finished)
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)

	s.setDesire(t, long, desire(t, "2Gi"), nil)
	s.setDesire(t, "web", desire(t, "2Gi"), nil)
	for name, uid := range map[string]types.UID{long: oldLong.UID, "web": old.UID} {
		got := s.waitRecreated(t, name, uid, "2Gi")
		framework.Eventually(t, stsTimeout, func() (bool, string) {
			got, _ = s.StatefulSet(t, name)
			return !recreate.HasFinalizer(got), fmt.Sprintf("re-created %s still carries the finalizer: %v", name, got.Finalizers)
		})
		if evs := s.StatefulSetEvents(t, name, controller.EventRecreateRefused); len(evs) != 0 {
			t.Errorf("%s: %s", name, scenario.DescribeEvents(evs))
		}
	}
	for _, reason := range []string{controller.EventRecreating, controller.EventRecreateDeleted, controller.EventRecreateReleased, controller.EventRecreated} {
		s.WaitStatefulSetEvent(t, "web", reason, stsTimeout)
	}
	if evs := s.StatefulSetEvents(t, "web", controller.EventRecreateWaiting); len(evs) != 0 {
		t.Errorf("a normal re-create recorded %s: %s", controller.EventRecreateWaiting, scenario.DescribeEvents(evs))
	}
}

// Finding 7, field ownership: the new object was created as statefulset-resizer creates it
// (from the record, with its finalizer and annotation) and another client wrote it before the
// finish step (a label, field manager other-writer). Once statefulset-resizer finishes, the old
// object's managers own their fields again, merged with the other writer's entry, and a
// server-side apply of the manifest by the old manager without --force-conflicts succeeds.
func TestRecreateRestoresFieldOwnershipAfterAnotherWrite(t *testing.T) {
	s := startSTSEnv(t)
	s.EnsureNode(t)
	sts := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 1, Policy: appsv1.ParallelPodManagement, Size: "1Gi"})
	sts.Labels = map[string]string{desired.OptInLabel: desired.OptInValue}
	s.PrecreateVolumes(t, sts)
	apply := func(sts *appsv1.StatefulSet) (string, error) {
		return s.Cluster.KubectlWithInput(t, manifest(t, sts), "apply", "--server-side", "-f", "-")
	}
	if out, err := apply(sts); err != nil {
		t.Fatalf("first apply: %v\n%s", err, out)
	}
	s.RunPod(t, "web", 0)
	before := s.pods(t, "web", 1)
	old, _ := s.StatefulSet(t, "web")

	s.storeRecord(t, old, "2Gi")
	s.orphanDelete(t, old)
	rec, err := recreate.Parse(s.recordOf(t, "web"))
	if err != nil {
		t.Fatal(err)
	}
	obj := rec.Object.DeepCopy()
	obj.ManagedFields = nil
	obj.Finalizers = append(obj.Finalizers, recreate.Finalizer)
	obj.Annotations = map[string]string{recreate.RecordAnnotation: recreate.RecordRef(s.Namespace, s.Namespace, "web")}
	sets := s.Client.AppsV1().StatefulSets(s.Namespace)
	created, err := sets.Create(s.Ctx, obj, metav1.CreateOptions{FieldManager: controller.Name})
	if err != nil {
		t.Fatalf("create web from its record: %v", err)
	}
	label := []byte(`{"metadata":{"labels":{"team":"storage"}}}`)
	if _, err := sets.Patch(s.Ctx, "web", types.MergePatchType, label, metav1.PatchOptions{FieldManager: "other-writer"}); err != nil {
		t.Fatalf("the other client's write: %v", err)
	}

	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	var got *appsv1.StatefulSet
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		got, _ = s.StatefulSet(t, "web")
		managers := map[string]bool{}
		for _, e := range got.ManagedFields {
			managers[e.Manager+"/"+string(e.Operation)] = true
		}
		ok := got.UID == created.UID && s.recordOf(t, "web") == nil && !recreate.HasFinalizer(got) &&
			got.Annotations[recreate.RecordAnnotation] == "" && managers["kubectl/Apply"] && managers["other-writer/Update"]
		return ok, fmt.Sprintf("uid %s (created %s), record present %v, finalizers %v, annotations %v, managers %v; want the record gone, "+
			"no finalizer nor annotation, and the entries of kubectl (Apply) and other-writer (Update)",
			got.UID, created.UID, s.recordOf(t, "web") != nil, got.Finalizers, got.Annotations, managers)
	})
	s.checkAdopted(t, "web", before, got.UID)

	scenario.WithSize("2Gi")(sts)
	sts.Spec.Replicas = ptr.To[int32](0)
	if out, err := apply(sts); err != nil {
		t.Fatalf("kubectl apply --server-side (no --force-conflicts) by the old manager after the re-create: %v\n%s", err, out)
	}
	cur, _ := s.StatefulSet(t, "web")
	if *cur.Spec.Replicas != 0 || cur.Labels["team"] != "storage" {
		t.Errorf("after the apply: replicas %d, labels %v; want 0 and the other writer's team=storage kept", *cur.Spec.Replicas, cur.Labels)
	}
}

// Invariant I1 against the cancel of finding 1: a dependent still owned by the old object once
// only the re-create's finalizer is left is not proof of someone else's delete. The garbage
// collector orphans the dependents its graph holds; a ControllerRevision the StatefulSet
// controller creates meanwhile (it does for a pod template edited on the terminating object,
// `kubectl rollout restart`, before the collector's orphaning makes it stop) can be missed and
// stay owned. TestRecreateKeepsEditsMadeWhileTerminating hits that race now and then (the
// re-create is then cancelled and the StatefulSet, which nobody deleted, is gone); this test
// builds the state the race leaves: statefulset-resizer is killed after its orphan delete, the
// garbage collector orphans what it knows, and a ControllerRevision owned by the old object
// appears. Started again, statefulset-resizer must still re-create the StatefulSet.
func TestRecreateLateDependentIsNotTakenForAUserDelete(t *testing.T) {
	s := startSTSEnv(t)
	ssr := s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 1, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	before := s.pods(t, "web", 1)
	thaw := s.freezeGarbageCollector(t)
	s.setDesire(t, "web", desire(t, "2Gi"), nil)
	s.waitTerminating(t, "web", old.UID)
	if err := ssr.Kill(); err != nil {
		t.Fatal(err)
	}
	thaw()
	sets := s.Client.AppsV1().StatefulSets(s.Namespace)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		cur, err := sets.Get(s.Ctx, "web", metav1.GetOptions{})
		return err == nil && slices.Equal(cur.Finalizers, []string{recreate.Finalizer}),
			fmt.Sprintf("want the old object held by the re-create's finalizer alone once the dependents are orphaned: %v %v", err, cur.Finalizers)
	})
	late := &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: "web-late", Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "web", UID: old.UID, Controller: ptr.To(true)}}},
		Data:     runtime.RawExtension{Raw: []byte(`{}`)},
		Revision: 2,
	}
	if _, err := s.Client.AppsV1().ControllerRevisions(s.Namespace).Create(s.Ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the late ControllerRevision: %v", err)
	}

	ssr.Start(t)
	got := s.waitRecreated(t, "web", old.UID, "2Gi")
	s.checkAdopted(t, "web", before, got.UID)
	if evs := s.StatefulSetEvents(t, "web", controller.EventRecreateCancelled); len(evs) != 0 {
		t.Errorf("the re-create of a StatefulSet nobody deleted was cancelled: %s", scenario.DescribeEvents(evs))
	}
}
