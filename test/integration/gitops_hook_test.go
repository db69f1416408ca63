//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// README.md's GitOps section tells Helm users to wait for the volumes with a post-upgrade hook
// Job that runs `statefulset-resizer wait`. TestGitOpsHelmHookJob runs that Job as the README
// shows it: the YAML is read from the README into a copy of gitops-chart, next to the
// ServiceAccount and Role the README says it needs. No kubelet runs, so the test plays it for
// the Job's pod (runPod, finishPod): it runs the pod's command on this machine with the pod's
// ServiceAccount and writes the pod's outcome, from which the real Job controller
// (kube-controller-manager) completes or fails the Job that Helm waits for.

// readmeHookJob returns the post-upgrade hook Job of README.md's GitOps section: the one ```yaml
// block of that section with the annotation `helm.sh/hook: post-upgrade`, de-indented as far
// as its fence is indented (a block inside a list item).
func readmeHookJob(t *testing.T, root string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []string
	in := false
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		heading := strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ")
		switch {
		case strings.HasPrefix(line, "### GitOps"):
			in = true
			continue
		case in && heading:
			i = len(lines)
			continue
		case !in || strings.TrimLeft(line, " ") != "```yaml":
			continue
		}
		indent := strings.Repeat(" ", len(line)-len(strings.TrimLeft(line, " ")))
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if block := strings.Join(body, "\n") + "\n"; strings.Contains(block, "helm.sh/hook: post-upgrade") {
			blocks = append(blocks, block)
		}
	}
	if len(blocks) != 1 {
		t.Fatalf("README.md: want one ```yaml block with helm.sh/hook: post-upgrade in the section \"### GitOps...\", found %d", len(blocks))
	}
	return blocks[0]
}

// hookChart returns a copy of gitops-chart with README.md's hook Job and
// testdata/gitops-hook-rbac.yaml (its ServiceAccount and Role) among its templates, and the
// Job as the README declares it.
func hookChart(t *testing.T, root string) (string, *batchv1.Job) {
	t.Helper()
	testdata := filepath.Join(root, "test", "integration", "testdata")
	chart := filepath.Join(t.TempDir(), "gitops-chart")
	if err := os.CopyFS(chart, os.DirFS(filepath.Join(testdata, "gitops-chart"))); err != nil {
		t.Fatal(err)
	}
	job := readmeHookJob(t, root)
	var decoded batchv1.Job
	if err := yaml.UnmarshalStrict([]byte(job), &decoded); err != nil || decoded.Kind != "Job" {
		t.Fatalf("README.md's hook Job is not a Job (kind %q, %v):\n%s", decoded.Kind, err, job)
	}
	rbac, err := os.ReadFile(filepath.Join(testdata, "gitops-hook-rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"db-volumes-job.yaml": []byte(job), "db-volumes-wait-rbac.yaml": rbac} {
		if err := os.WriteFile(filepath.Join(chart, "templates", name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return chart, &decoded
}

// imageHasCommand checks what the test cannot run: that the Job's image is this project's
// (csi-resizer, whatever the registry and tag) and that the Dockerfile puts a file at the path
// of the Job's command, the path runPod maps to the locally built binary.
func imageHasCommand(t *testing.T, root string, job *batchv1.Job) {
	t.Helper()
	containers := job.Spec.Template.Spec.Containers
	if len(containers) != 1 || len(containers[0].Command) == 0 {
		t.Fatalf("README.md's hook Job: want one container with a command, got %+v", containers)
	}
	image, command := containers[0].Image, containers[0].Command[0]
	if name, _, _ := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":"); name != "csi-resizer" {
		t.Errorf("README.md's hook Job runs image %q: want the csi-resizer image (make image), which has %s", image, command)
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(dockerfile), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == "COPY" && f[len(f)-1] == command {
			return
		}
	}
	t.Errorf("README.md's hook Job runs %s, which the Dockerfile does not COPY into the image", command)
}

// helmRun is a helm command running in the background.
type helmRun struct {
	args []string
	out  bytes.Buffer
	err  error
	done chan struct{}
}

func startHelm(t *testing.T, helm, home string, args ...string) *helmRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	h := &helmRun{args: args, done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	cmd.Stdout, cmd.Stderr = &h.out, &h.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	go func() {
		defer close(h.done)
		h.err = cmd.Wait()
	}()
	return h
}

func (h *helmRun) exited() bool {
	select {
	case <-h.done:
		return true
	default:
		return false
	}
}

// result waits for helm to end and returns its output and error.
func (h *helmRun) result() (string, error) {
	<-h.done
	return h.out.String(), h.err
}

// podRun is a pod whose command runPod has run, and how the command ended.
type podRun struct {
	pod    *v1.Pod
	code   int
	output string
}

// runPod plays the kubelet for the next pod matching selector in the env's namespace (one that
// is neither finished nor being deleted): it marks the pod Running, then runs its one
// container's command on this machine, programs mapping the command's executable (a path in
// the image) to a local binary, with the container's literal env and, where the container would
// read its mounted token, KUBECONFIG set to a token of the pod's ServiceAccount. finishPod
// writes the outcome.
func (g *gitopsEnv) runPod(t *testing.T, selector string, programs map[string]string) podRun {
	t.Helper()
	var pod *v1.Pod
	framework.Eventually(t, time.Minute, func() (bool, string) {
		list, err := g.Client.CoreV1().Pods(g.Namespace).List(g.Ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for i, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
				pod = &list.Items[i]
				return true, ""
			}
			seen = append(seen, p.Name+" "+string(p.Status.Phase))
		}
		return false, fmt.Sprintf("no pod to run among those matching %s: %v", selector, seen)
	})
	if len(pod.Spec.Containers) != 1 || len(pod.Spec.InitContainers) != 0 {
		t.Fatalf("pod %s: %d containers and %d init containers; runPod runs one container", pod.Name, len(pod.Spec.Containers), len(pod.Spec.InitContainers))
	}
	c := pod.Spec.Containers[0]
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(argv) == 0 || programs[argv[0]] == "" {
		t.Fatalf("pod %s runs %q: want a command starting with one of %v", pod.Name, argv, programs)
	}
	env := []string{"KUBECONFIG=" + g.Cluster.ServiceAccountKubeconfig(t, g.Namespace, pod.Spec.ServiceAccountName), "HOME=" + t.TempDir()}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Fatalf("pod %s: env %s comes from %+v; runPod takes literal values only", pod.Name, e.Name, e.ValueFrom)
		}
		env = append(env, e.Name+"="+e.Value)
	}
	pod = framework.MarkPodRunning(t, g.Ctx, g.Client, pod)

	ctx, cancel := context.WithTimeout(g.Ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, programs[argv[0]], argv[1:]...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	run := podRun{pod: pod, output: string(out)}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		run.code = exit.ExitCode()
	default:
		t.Fatalf("pod %s: running %q: %v\n%s", pod.Name, argv, err, out)
	}
	t.Logf("pod %s (ServiceAccount %s): %q exited %d:\n%s", pod.Name, pod.Spec.ServiceAccountName, argv, run.code, out)
	return run
}

// finishPod writes what a kubelet writes when the pod's container has exited: phase Succeeded
// for exit code 0, else Failed, the container terminated with the exit code, not ready.
func (g *gitopsEnv) finishPod(t *testing.T, run podRun) {
	t.Helper()
	phase, reason := v1.PodSucceeded, "Completed"
	if run.code != 0 {
		phase, reason = v1.PodFailed, "Error"
	}
	pods := g.Client.CoreV1().Pods(g.Namespace)
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		cur, err := pods.Get(g.Ctx, run.pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if cur.UID != run.pod.UID {
			t.Fatalf("pod %s was replaced (uid %s, ran %s)", cur.Name, cur.UID, run.pod.UID)
		}
		now := metav1.Now()
		cur.Status.Phase = phase
		for i := range cur.Status.Conditions {
			if ct := cur.Status.Conditions[i].Type; ct == v1.PodReady || ct == v1.ContainersReady {
				cur.Status.Conditions[i] = v1.PodCondition{Type: ct, Status: v1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now}
			}
		}
		for i := range cur.Status.ContainerStatuses {
			cs := &cur.Status.ContainerStatuses[i]
			started := now
			if cs.State.Running != nil {
				started = cs.State.Running.StartedAt
			}
			cs.Ready, cs.Started = false, ptr.To(false)
			cs.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{
				ExitCode: int32(run.code), Reason: reason, StartedAt: started, FinishedAt: now, ContainerID: cs.ContainerID}}
		}
		_, err = pods.UpdateStatus(g.Ctx, cur, metav1.UpdateOptions{})
		return err == nil, fmt.Sprintf("pod %s status %s: %v", cur.Name, phase, err)
	})
}

// Helm 3 with README.md's post-upgrade hook Job, on a chart whose StatefulSet `db` (2 replicas)
// is opted in. (a) `helm upgrade` to 2Gi returns only after the hook's `wait` exited 0, and
// succeeds with the PVCs at 2Gi and the StatefulSet re-created with them. (b) `helm upgrade` to
// a size the driver refuses fails naming the hook Job, and the hook's `wait` exited 1 with the
// driver's message. (c) `helm upgrade` to a lower size the driver gives succeeds (recovery)
// with the PVCs at it, and the live object equals the chart's render.
func TestGitOpsHelmHookJob(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm := gitOpsHelm(t, root)
	chart, job := hookChart(t, root)
	imageHasCommand(t, root, job)
	g := startGitOpsEnv(t)
	home := t.TempDir()
	// The Job's pods, by the label the Job controller puts on them.
	hookPods := batchv1.JobNameLabel + "=" + job.Name
	programs := map[string]string{"/statefulset-resizer": framework.BuildStatefulSetResizer(t)}
	helmArgs := func(verb, size string) []string {
		return []string{verb, "db", chart, "--kubeconfig", g.Cluster.Kubeconfig, "--namespace", g.Namespace, "--timeout", "4m",
			"--set", "storageClassName=" + g.StorageClass, "--set", "replicas=2", "--set", "size=" + size}
	}
	// upgrade runs `helm upgrade` to size and plays the kubelet for the hook's pod; helm must
	// not have returned while the pod ran.
	upgrade := func(size string) (podRun, string, error) {
		t.Helper()
		h := startHelm(t, helm, home, helmArgs("upgrade", size)...)
		run := g.runPod(t, hookPods, programs)
		if h.exited() {
			out, err := h.result()
			t.Fatalf("helm upgrade to %s returned (%v) while its hook's pod %s was running:\n%s", size, err, run.pod.Name, out)
		}
		g.finishPod(t, run)
		out, err := h.result()
		t.Logf("helm upgrade to %s: %v\n%s", size, err, out)
		return run, out, err
	}
	// grown checks, without waiting, that every PVC and the live template are at size.
	grown := func(size string, oldUID string) {
		t.Helper()
		for i := 0; i < 2; i++ {
			pvc := g.PVC(t, scenario.ClaimName("db", i))
			if ok, why := scenario.Done(size)(pvc); !ok {
				t.Errorf("when helm upgrade returned, %s: %s; %s", pvc.Name, why, scenario.Describe(pvc))
			}
		}
		cur, _ := g.StatefulSet(t, "db")
		q := cur.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage]
		if _, pending := cur.Annotations[desired.Annotation]; pending || string(cur.UID) == oldUID || !scenario.Is(q, size) {
			t.Errorf("when helm upgrade returned, StatefulSet db: uid %s (before %s), template %s, desired annotation %v; want re-created at %s",
				cur.UID, oldUID, &q, pending, size)
		}
	}

	// The chart's render, with the label Helm adds to what it manages.
	sts := g.gitManifest("db", 2, appsv1.ParallelPodManagement, "1Gi")
	sts.Labels["app.kubernetes.io/managed-by"] = "Helm"
	g.createWithSpareBy(t, sts, 0, func() {
		if out, err := startHelm(t, helm, home, helmArgs("install", "1Gi")...).result(); err != nil {
			t.Fatalf("helm install: %v\n%s", err, out)
		}
	})
	before, _ := g.WaitTemplateStatus(t, "db", stsTimeout, scenario.Finished)

	t.Log("(a) helm upgrade to 2Gi")
	run, out, err := upgrade("2Gi")
	if err != nil || run.code != 0 {
		t.Fatalf("helm upgrade to 2Gi: %v (hook's wait exited %d); want success after wait exited 0\n%s", err, run.code, out)
	}
	grown("2Gi", string(before.UID))
	afterA, _ := g.StatefulSet(t, "db")

	t.Log("(b) helm upgrade to 100Gi, which the driver refuses")
	const driverMessage = "no such size in this pool"
	g.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: driverMessage, MinRequiredBytes: 50 << 30}})
	run, out, err = upgrade("100Gi")
	if jobFailed := "job " + job.Name + " failed"; err == nil || !strings.Contains(out, "post-upgrade hooks failed") || !strings.Contains(out, jobFailed) {
		t.Errorf("helm upgrade to 100Gi: %v; want it to fail with \"post-upgrade hooks failed\" and %q\n%s", err, jobFailed, out)
	}
	if run.code != 1 || !strings.Contains(run.output, driverMessage) || !strings.Contains(run.output, "infeasible") {
		t.Errorf("hook's wait exited %d; want 1 with the driver's message %q:\n%s", run.code, driverMessage, run.output)
	}

	t.Log("(c) helm upgrade to 3Gi: lowered in Git, the driver gives it")
	run, out, err = upgrade("3Gi")
	if err != nil || run.code != 0 {
		t.Fatalf("helm upgrade to 3Gi: %v (hook's wait exited %d); want success after wait exited 0\n%s", err, run.code, out)
	}
	grown("3Gi", string(afterA.UID))
	scenario.WithSize("3Gi")(sts)
	g.equalsManifest(t, sts)
}
