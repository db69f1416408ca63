//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/controller"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// The re-create's safety on the real control plane (issue 24, items 1 and 3, finding 2d):
// records nobody else can forge, edits made while the old object is deleted kept, and a
// StatefulSet created by someone else while the name is free taken as it is.

// asUser is a client of the cluster that impersonates user (the admin may impersonate).
func (s *stsEnv) asUser(t *testing.T, user string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(s.Cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// grantConfigMapWriter lets user create (and read) ConfigMaps in namespace, and nothing else;
// with view, also read everything the aggregated "view" role shows (uids, resourceVersions).
func (s *stsEnv) grantConfigMapWriter(t *testing.T, namespace, user string, view bool) {
	t.Helper()
	rbac := s.Client.RbacV1()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user + "-configmaps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get", "list"}}}}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	if _, err := rbac.Roles(namespace).Create(s.Ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(namespace).Create(s.Ctx, &rbacv1.RoleBinding{ObjectMeta: role.ObjectMeta, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if view {
		if _, err := rbac.RoleBindings(namespace).Create(s.Ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: user + "-view"},
			Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// forgedRecord is a record ConfigMap as a forger would write it: named like statefulset-resizer's
// (old style without the namespace, or new style), labelled, holding obj with a pod template
// that runs as another ServiceAccount, for the uid and resourceVersion given.
func forgedRecord(t *testing.T, name, namespace string, obj *appsv1.StatefulSet, uid types.UID, resourceVersion string) *v1.ConfigMap {
	t.Helper()
	obj = obj.DeepCopy()
	obj.UID, obj.ResourceVersion, obj.ManagedFields = "", "", nil
	obj.Spec.Template.Spec.ServiceAccountName = "privileged"
	obj.Spec.Template.Annotations = map[string]string{"forged": "true"}
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{recreate.RecordLabel: "true"}},
		Data: map[string]string{"statefulset": string(data), "uid": string(uid), "resourceVersion": resourceVersion}}
}

// Finding 1: users who may only create ConfigMaps in the StatefulSets' namespace (one of them
// with `view` too, so that it can read uids and resourceVersions) write records in the old and
// the new format: for StatefulSets that do not exist (the controller would have created them
// with any pod template), and for two live ones, opted in or not (it would have orphan-deleted
// them and created the forged object, which adopts their pods). statefulset-resizer runs in its
// own namespace, with the shipped RBAC: none of it has any effect, and a write to its own
// namespace is refused. A record that does land in its namespace (written by someone who may,
// an admin) is acted on whatever the opt-in says (issue 31, invariant I1: a record without an
// object is always created, so that an opt-out in the middle of a re-create cannot strand the
// workload; only statefulset-resizer and the administrators of its namespace can write one):
// the StatefulSet it names, not opted in, is created from it.
func TestRecreateRecordsCannotBeForged(t *testing.T) {
	s := startSTSEnv(t)
	ssrNS := framework.CreateNamespace(t, s.Ctx, s.Client, "ssr-system")
	kubeconfig := scenario.ApplyStatefulSetResizerRBAC(t, s.Cluster, ssrNS)
	ssr := s.StartStatefulSetResizer(t, kubeconfig, "--recreate-record-namespace="+ssrNS)
	plain := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "victim", Replicas: 1, Policy: appsv1.ParallelPodManagement, Size: "1Gi"})
	s.CreateStatefulSet(t, plain)
	opted := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "opted", Replicas: 1, Policy: appsv1.ParallelPodManagement, Size: "1Gi"})
	opted.Labels = map[string]string{desired.OptInLabel: desired.OptInValue}
	s.CreateStatefulSet(t, opted)
	victims := map[string]*appsv1.StatefulSet{}
	for _, name := range []string{"victim", "opted"} {
		victims[name], _ = s.WaitTemplateStatus(t, name, stsTimeout, scenario.Finished)
	}

	s.grantConfigMapWriter(t, s.Namespace, "mallory", false)
	s.grantConfigMapWriter(t, s.Namespace, "eve", true)
	mallory, eve := s.asUser(t, "mallory"), s.asUser(t, "eve")
	ghost := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "ghost", Replicas: 1, Policy: appsv1.ParallelPodManagement, Size: "5Gi"})
	ghost2 := ghost.DeepCopy()
	ghost2.Name = "ghost2"
	forgeries := []struct {
		by     kubernetes.Interface
		record *v1.ConfigMap
	}{
		{mallory, forgedRecord(t, recreate.RecordPrefix+"ghost", s.Namespace, ghost, "uid-of-nothing", "")},
		{mallory, forgedRecord(t, recreate.RecordName(s.Namespace, "ghost2"), s.Namespace, ghost2, "uid-of-nothing", "")},
	}
	for name, live := range victims {
		forgeries = append(forgeries,
			struct {
				by     kubernetes.Interface
				record *v1.ConfigMap
			}{eve, forgedRecord(t, recreate.RecordPrefix+name, s.Namespace, live, live.UID, live.ResourceVersion)},
			struct {
				by     kubernetes.Interface
				record *v1.ConfigMap
			}{eve, forgedRecord(t, recreate.RecordName(s.Namespace, name), s.Namespace, live, live.UID, live.ResourceVersion)})
	}
	for _, f := range forgeries {
		if _, err := f.by.CoreV1().ConfigMaps(s.Namespace).Create(s.Ctx, f.record, metav1.CreateOptions{}); err != nil {
			t.Fatalf("forge %s: %v", f.record.Name, err)
		}
	}
	into := forgedRecord(t, recreate.RecordName(s.Namespace, "ghost3"), ssrNS, ghost, "uid-of-nothing", "")
	if _, err := eve.CoreV1().ConfigMaps(ssrNS).Create(s.Ctx, into, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("eve writes a record into statefulset-resizer's namespace: %v, want Forbidden", err)
	}
	// An admin's record in the controller's namespace, for a StatefulSet that is not opted in.
	ghost3 := ghost.DeepCopy()
	ghost3.Name = "ghost3"
	if _, err := s.Client.CoreV1().ConfigMaps(ssrNS).Create(s.Ctx, forgedRecord(t, recreate.RecordName(s.Namespace, "ghost3"), ssrNS, ghost3, "uid-of-nothing", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sets := s.Client.AppsV1().StatefulSets(s.Namespace)
	framework.Eventually(t, stsTimeout, func() (bool, string) {
		_, err := sets.Get(s.Ctx, "ghost3", metav1.GetOptions{})
		return err == nil, fmt.Sprintf("StatefulSet ghost3: %v; want it created from the record in %s:\n%s", err, ssrNS, ssr.LogTail(20))
	})

	framework.Consistently(t, 5*time.Second, func() (bool, string) {
		for _, name := range []string{"ghost", "ghost2"} {
			if _, err := sets.Get(s.Ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Sprintf("StatefulSet %s exists (%v): created from a forged record", name, err)
			}
		}
		for name, before := range victims {
			cur, err := sets.Get(s.Ctx, name, metav1.GetOptions{})
			switch {
			case err != nil:
				return false, fmt.Sprintf("%s: %v", name, err)
			case cur.UID != before.UID || cur.DeletionTimestamp != nil || len(cur.Finalizers) != 0:
				return false, fmt.Sprintf("%s: uid %s (was %s), deleting %v, finalizers %v: touched by a forged record", name, cur.UID, before.UID, cur.DeletionTimestamp != nil, cur.Finalizers)
			case cur.Spec.Template.Annotations["forged"] != "":
				return false, fmt.Sprintf("%s runs the forged pod template", name)
			}
		}
		return true, ""
	})
}

// Item 3: edits made after the orphan delete are kept. kube-controller-manager is frozen, so the
// garbage collector leaves the old object terminating; meanwhile a label and a pod template
// annotation (`kubectl rollout restart`) are added to it, which the apiserver accepts. Once the
// collector runs, the re-created object has the desired template and both edits.
func TestRecreateKeepsEditsMadeWhileTerminating(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	s.CreateStatefulSet(t, s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 1, Policy: appsv1.ParallelPodManagement, Size: "1Gi"}))
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	thaw := s.freezeGarbageCollector(t)
	s.setDesire(t, "web", desire(t, "2Gi"), nil)
	s.waitTerminating(t, "web", old.UID)
	for _, args := range [][]string{{"label", "statefulset", "web", "team=storage"}, {"rollout", "restart", "statefulset", "web"}} {
		if out, err := s.Cluster.Kubectl(t, append(args, "-n", s.Namespace)...); err != nil {
			t.Fatalf("kubectl %s on the terminating object: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	edited, _ := s.StatefulSet(t, "web")
	if edited.UID != old.UID || edited.DeletionTimestamp == nil {
		t.Fatalf("the edits did not land on the terminating object: uid %s, deleting %v", edited.UID, edited.DeletionTimestamp != nil)
	}
	thaw()
	got := s.waitRecreated(t, "web", old.UID, "2Gi")
	restartedAt := edited.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"]
	if got.Labels["team"] != "storage" || restartedAt == "" || got.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] != restartedAt {
		t.Errorf("re-created object: labels %v, pod template annotations %v; want team=storage and restartedAt=%s, the edits made while the old one was terminating",
			got.Labels, got.Spec.Template.Annotations, restartedAt)
	}
}

// Finding 2d: a client that creates the StatefulSet itself while the name is free during a
// re-create, as Argo CD's self-heal would, from Git (with the desired template). A
// ValidatingAdmissionPolicy refuses statefulset-resizer's own create meanwhile, so that the other
// client certainly comes first; it lets dry runs through, as a refusal that starts after
// statefulset-resizer's dry-run proof would (issue 31, I3: the proof before the delete refuses
// anything the apiserver refuses at that time, and nothing would be deleted). The end: one object, the other client's, with the desired
// template, the pods adopted, the record gone, Recreated told, and no further re-create.
func TestRecreateWithAConcurrentCreator(t *testing.T) {
	s := startSTSEnv(t)
	s.StartStatefulSetResizer(t, s.ssrKubeconfig)
	sts := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "web", Replicas: 2, Policy: appsv1.ParallelPodManagement, Size: "1Gi"})
	sts.Labels = map[string]string{desired.OptInLabel: desired.OptInValue}
	s.CreateStatefulSet(t, sts)
	old, _ := s.WaitTemplateStatus(t, "web", stsTimeout, scenario.Finished)
	before := s.pods(t, "web", 2)
	user := "system:serviceaccount:" + s.Namespace + ":statefulset-resizer"
	lift := s.refuseCreates(t, user)

	s.setDesire(t, "web", desire(t, "2Gi"), nil)
	s.WaitStatefulSetEvent(t, "web", controller.EventRecreateFailed, stsTimeout, "Cannot create StatefulSet")
	git := sts.DeepCopy()
	scenario.WithSize("2Gi")(git)
	if out, err := s.Cluster.KubectlWithInput(t, manifest(t, git), "apply", "-f", "-"); err != nil {
		t.Fatalf("the other client's apply while the name is free: %v\n%s", err, out)
	}
	theirs, _ := s.StatefulSet(t, "web")
	lift()

	s.WaitStatefulSetEvent(t, "web", controller.EventRecreated, stsTimeout, string(old.UID))
	got := s.waitRecreated(t, "web", old.UID, "2Gi")
	if got.UID != theirs.UID {
		t.Fatalf("uid %s, want the other client's object %s kept", got.UID, theirs.UID)
	}
	s.checkAdopted(t, "web", before, got.UID)
	for i := 0; i < 2; i++ {
		s.waitDone(t, scenario.ClaimName("web", i), "2Gi")
	}
	recreating := len(s.StatefulSetEvents(t, "web", controller.EventRecreating))
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		cur, _ := s.StatefulSet(t, "web")
		n := len(s.StatefulSetEvents(t, "web", controller.EventRecreating))
		return cur.UID == theirs.UID && n == recreating && s.recordOf(t, "web") == nil,
			fmt.Sprintf("uid %s (want %s), %d Recreating events (was %d): a re-create loop", cur.UID, theirs.UID, n, recreating)
	})
	if r := s.wait(t, "web"); r.Code != 0 {
		t.Errorf("wait: %s; want exit 0", r)
	}
}

// refuseCreates makes the apiserver refuse StatefulSet creates by user in the test's namespace,
// but not their server dry runs (a ValidatingAdmissionPolicy, checked with a create until it is
// in force), and returns the function that lifts it.
func (s *stsEnv) refuseCreates(t *testing.T, user string) func() {
	t.Helper()
	name := "refuse-creates-" + s.Namespace
	s.ExpectRefusals("ValidatingAdmissionPolicy '" + name + "'")
	policy := fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: %[1]s
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["statefulsets"]
  validations:
  - expression: "request.userInfo.username != '%[2]s' || request.dryRun"
    message: "the test refuses statefulset-resizer's creates for now"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: %[1]s
spec:
  policyName: %[1]s
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        kubernetes.io/metadata.name: %[3]s
`, name, user, s.Namespace)
	if out, err := s.Cluster.KubectlWithInput(t, policy, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the ValidatingAdmissionPolicy: %v\n%s", err, out)
	}
	probe := s.NewStatefulSet(scenario.StatefulSetOptions{Name: "probe", Replicas: 0, Policy: appsv1.ParallelPodManagement, Size: "1Gi"})
	as := s.asUser(t, user).AppsV1().StatefulSets(s.Namespace)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		_, err := as.Create(s.Ctx, probe, metav1.CreateOptions{})
		if err == nil {
			if err := as.Delete(s.Ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
				return false, fmt.Sprintf("delete the probe: %v", err)
			}
		}
		return err != nil && strings.Contains(err.Error(), "refuses"), fmt.Sprintf("a create by %s: %v; want the policy's refusal", user, err)
	})
	if _, err := as.Create(s.Ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("a dry-run create by %s: %v; want it let through", user, err)
	}
	return func() {
		if out, err := s.Cluster.Kubectl(t, "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name); err != nil {
			t.Fatalf("delete the ValidatingAdmissionPolicy: %v\n%s", err, out)
		}
	}
}
