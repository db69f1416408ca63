//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/controller"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
	"github.com/csi-resizer/csi-resizer/test/framework"
)

// userDeleteDuringRecreate is issue 31 finding 1 on the node (docs/design.md §3.7, invariant
// I2; TestRecreateUserDeleteIsNotUndone in test/integration is the control-plane version): a
// user's `kubectl delete statefulset` while the old object waits for the garbage collector is
// not undone. kube-controller-manager is stopped (SIGSTOP) before the bigger template is
// applied, so the old object stays terminating with the orphan finalizer after
// statefulset-resizer's orphan delete; the user's delete (background) replaces that
// propagation; statefulset-resizer cancels (RecreateCancelled, record deleted, finalizer
// removed) and creates nothing; kube-controller-manager, started again, deletes the pod the old
// object owned, and no StatefulSet comes back. Needs statefulset-resizer installed with its
// webhook in ssrNamespace.
func userDeleteDuringRecreate(t *testing.T, c *Cluster) {
	s := ssrScenario{namespace: "ssr-user-delete", podManagement: "Parallel", replicas: 1}
	old, pod := runOneReplica(t, c, s)
	waitWebhookAnswers(t, c, s)

	kcm := stopControllerManager(t, c)
	start := time.Now()
	if _, err := c.KubectlWithInput(t, s.manifest("2Gi"), "-n", s.namespace, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	waitOrphanDelete(t, c, s, old.UID)
	t.Logf("statefulset-resizer's orphan delete %s after the apply; the garbage collector is stopped", time.Since(start).Round(100*time.Millisecond))

	start = time.Now()
	if _, err := c.Kubectl(t, "-n", s.namespace, "delete", "statefulset", "web", "--wait=false"); err != nil {
		t.Fatal(err)
	}
	waitCancelled(t, c, s, old.UID)
	t.Logf("%s, record deleted and StatefulSet gone %s after the user's delete: %s", controller.EventRecreateCancelled,
		time.Since(start).Round(100*time.Millisecond), ssrEvents(t, c, s.namespace, controller.EventRecreateCancelled)[0])

	kcm.restart(t)
	start = time.Now()
	waitPodDeleted(t, c, s, pod.UID)
	t.Logf("pod web-0 deleted by the garbage collector %s after kube-controller-manager's restart", time.Since(start).Round(100*time.Millisecond))
	// The record is gone, so nothing can create web again; whatever did would be here by now.
	if cur, err := c.Client.AppsV1().StatefulSets(s.namespace).Get(context.Background(), "web", metav1.GetOptions{}); err == nil {
		t.Errorf("StatefulSet web exists again (uid %s, was %s): the user's delete was undone", cur.UID, old.UID)
	} else if !apierrors.IsNotFound(err) {
		t.Error(err)
	}
	for _, reason := range []string{controller.EventRecreated, controller.EventRecreateReleased} {
		if evs := ssrEvents(t, c, s.namespace, reason); len(evs) != 0 {
			t.Errorf("%s event after the user's delete: %s", reason, evs[0])
		}
	}
}

// runOneReplica creates the scenario's namespace (deleted when the test ends) and StatefulSet
// web at 1Gi, and returns it and its pod web-0 once running.
func runOneReplica(t *testing.T, c *Cluster, s ssrScenario) (*appsv1.StatefulSet, *corev1.Pod) {
	t.Helper()
	ctx := context.Background()
	start := rollOutScenario(t, c, s)
	old, err := c.Client.AppsV1().StatefulSets(s.namespace).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := c.Client.CoreV1().Pods(s.namespace).Get(ctx, "web-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if owner := metav1.GetControllerOf(pod); owner == nil || owner.UID != old.UID {
		t.Fatalf("pod web-0: controller %v, want StatefulSet web (uid %s)", owner, old.UID)
	}
	t.Logf("StatefulSet %s/web (uid %s): pod web-0 (uid %s) running in %s", s.namespace, old.UID, pod.UID, time.Since(start).Round(time.Second))
	return old, pod
}

// waitOrphanDelete waits for statefulset-resizer's orphan delete of the object uid: deleting,
// held by both the garbage collector's orphan finalizer and the re-create's, RecreateDeleted.
func waitOrphanDelete(t *testing.T, c *Cluster, s ssrScenario, uid types.UID) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		cur, err := c.Client.AppsV1().StatefulSets(s.namespace).Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			return false, fmt.Sprintf("StatefulSet web: %v", err)
		}
		if cur.UID != uid {
			return false, fmt.Sprintf("StatefulSet web: uid %s, want %s", cur.UID, uid)
		}
		if cur.DeletionTimestamp == nil || !recreate.HasFinalizer(cur) || !slices.Contains(cur.Finalizers, metav1.FinalizerOrphanDependents) {
			return false, fmt.Sprintf("StatefulSet web: deletionTimestamp %v, finalizers %v; want statefulset-resizer's orphan delete (%s and %s)",
				cur.DeletionTimestamp, cur.Finalizers, metav1.FinalizerOrphanDependents, recreate.Finalizer)
		}
		return len(ssrEvents(t, c, s.namespace, controller.EventRecreateDeleted)) > 0, "no " + controller.EventRecreateDeleted + " event"
	})
}

// waitCancelled waits until the StatefulSet web is gone, with RecreateCancelled and no record,
// naming the new object when it was created again.
func waitCancelled(t *testing.T, c *Cluster, s ssrScenario, oldUID types.UID) {
	t.Helper()
	ctx := context.Background()
	record := recreate.RecordName(s.namespace, "web")
	framework.Eventually(t, time.Minute, func() (bool, string) {
		cur, err := c.Client.AppsV1().StatefulSets(s.namespace).Get(ctx, "web", metav1.GetOptions{})
		switch {
		case err == nil && cur.UID != oldUID:
			return false, fmt.Sprintf("StatefulSet web created again (uid %s, was %s; events %s: %q): the user's delete was undone",
				cur.UID, oldUID, controller.EventRecreated, ssrEvents(t, c, s.namespace, controller.EventRecreated))
		case err == nil:
			return false, fmt.Sprintf("StatefulSet web (uid %s) still there: finalizers %v", cur.UID, cur.Finalizers)
		case !apierrors.IsNotFound(err):
			return false, err.Error()
		}
		if len(ssrEvents(t, c, s.namespace, controller.EventRecreateCancelled)) == 0 {
			return false, "StatefulSet web gone, but no " + controller.EventRecreateCancelled + " event"
		}
		_, err = c.Client.CoreV1().ConfigMaps(ssrNamespace).Get(ctx, record, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("record ConfigMap %s/%s still there (%v)", ssrNamespace, record, err)
	})
}

// waitPodDeleted waits until the pod web-0 of uid is gone (deleted by the garbage collector as
// a dependent of the deleted StatefulSet) and no other pod of that name took its place.
func waitPodDeleted(t *testing.T, c *Cluster, s ssrScenario, uid types.UID) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		cur, err := c.Client.CoreV1().Pods(s.namespace).Get(context.Background(), "web-0", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, ""
		case err != nil:
			return false, err.Error()
		case cur.UID == uid:
			return false, fmt.Sprintf("pod web-0 (uid %s, owners %v, deleting %v): not deleted by the garbage collector (no owner: orphaned)", cur.UID, cur.OwnerReferences, cur.DeletionTimestamp != nil)
		}
		return false, fmt.Sprintf("pod web-0 exists again (uid %s, owners %v): the user's delete was undone", cur.UID, cur.OwnerReferences)
	})
}

// ssrEvents returns the messages of the events reason on the StatefulSet web of ns.
func ssrEvents(t *testing.T, c *Cluster, ns, reason string) []string {
	t.Helper()
	events, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=StatefulSet,involvedObject.name=web,reason=" + reason,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range events.Items {
		out = append(out, e.Message)
	}
	return out
}

// stoppedControllerManager is the node's kube-controller-manager, stopped by SIGSTOP.
type stoppedControllerManager struct {
	c         *Cluster
	pid       int
	cmdline   []string
	restarted bool
}

// stopControllerManager stops the node's kube-controller-manager (its pid is the one up.sh's
// spawn wrote: nsenter and setsid exec it, so it is the process itself, checked here) with
// SIGSTOP. Unless restart ran, the test's cleanup sends SIGCONT, whatever the outcome.
func stopControllerManager(t *testing.T, c *Cluster) *stoppedControllerManager {
	t.Helper()
	pidFile := filepath.Join(c.Dir, "pids", "kube-controller-manager")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", pidFile, err)
	}
	if err := checkExe(pid, "kube-controller-manager"); err != nil {
		t.Fatalf("%s: %v", pidFile, err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	k := &stoppedControllerManager{c: c, pid: pid, cmdline: strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP kube-controller-manager (pid %d): %v", pid, err)
	}
	t.Cleanup(func() {
		if !k.restarted {
			if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT kube-controller-manager (pid %d): %v", pid, err)
			}
		}
	})
	t.Logf("kube-controller-manager (pid %d) stopped with SIGSTOP", pid)
	return k
}

// restart kills the stopped kube-controller-manager and starts it again as up.sh's spawn did (same
// command line, namespaces, cgroups and log), recording the new pid in the pids directory. Not
// SIGCONT: a thawed garbage collector still processes the orphan request it missed while
// stopped, and orphans the pods while it also deletes them as dependents of the gone object
// (whichever comes first wins; Kubernetes', not this test's subject: seen here, the pod left
// running with no owner); a started one, like a kube-controller-manager that was down, works
// from the objects as they are.
func (k *stoppedControllerManager) restart(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(k.pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL kube-controller-manager (pid %d): %v", k.pid, err)
	}
	k.restarted = true
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", k.pid))
		// A zombie (state Z, after the command's ")") holds no port any more.
		gone := err != nil || strings.HasPrefix(string(stat[strings.LastIndexByte(string(stat), ')')+1:]), " Z")
		return gone, fmt.Sprintf("kube-controller-manager (pid %d) still running after SIGKILL", k.pid)
	})
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// up.sh's own spawn (hack/cluster/lib.sh), which writes the new pid in the pids directory.
	cmd := exec.Command("bash", append([]string{"-c", `source "$1"; shift; spawn kube-controller-manager "$@"`, "bash",
		filepath.Join(root, "hack", "cluster", "lib.sh")}, k.cmdline...)...)
	cmd.Env = k.c.opts.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("start kube-controller-manager again: %v\n%s", err, out)
	}
	var pid int
	framework.Eventually(t, 10*time.Second, func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(k.c.Dir, "pids", "kube-controller-manager"))
		if err == nil {
			pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if err == nil {
			err = checkExe(pid, "kube-controller-manager")
		}
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("kube-controller-manager killed (pid %d) and started again (pid %d)", k.pid, pid)
}

// checkExe says why pid is not a process running the binary name.
func checkExe(pid int, name string) error {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	if filepath.Base(exe) != name {
		return fmt.Errorf("pid %d runs %s, not %s", pid, exe, name)
	}
	return nil
}
