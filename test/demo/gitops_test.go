//go:build integration

package demo

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// Step 6 follows the README's "GitOps" section: an opted-in StatefulSet kept as a manifest
// file, a bigger volumeClaimTemplates size applied with kubectl as a pipeline would, and
// `statefulset-resizer wait`.
const (
	stsName     = "db"
	stsReplicas = 2
	gitSize     = "1Gi"
	gitBigger   = "2Gi"
	otherLabel  = "tier: db"
	waitTimeout = "2m"
)

// gitManifest is the StatefulSet db as a team keeps it in Git, in the demo's namespace and
// StorageClass: opted in by its label, two replicas (Parallel), one volume claim template of
// size; with labelled, it also carries otherLabel.
func (d *demo) gitManifest(size string, labelled bool) string {
	extra := ""
	if labelled {
		extra = "\n    " + otherLabel
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: %[1]s
  namespace: %[2]s
  labels:
    %[3]s: %[4]s%[5]s
spec:
  replicas: %[6]d
  podManagementPolicy: Parallel
  serviceName: %[1]s
  selector:
    matchLabels:
      app: %[1]s
  template:
    metadata:
      labels:
        app: %[1]s
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: app
        image: registry.k8s.io/pause:3.10
        volumeMounts:
        - name: %[7]s
          mountPath: /data
  volumeClaimTemplates:
  - metadata:
      name: %[7]s
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: %[8]s
      resources:
        requests:
          storage: %[9]s
`, stsName, d.e.Namespace, desired.OptInLabel, desired.OptInValue, extra, stsReplicas, scenario.TemplateName, d.e.StorageClass, size)
}

// startStatefulSetResizer runs statefulset-resizer's controller and its admission webhook (two
// processes, each with its shipped ServiceAccount), the shipped MutatingWebhookConfiguration
// registered by URL.
func (d *demo) startStatefulSetResizer() {
	t, e := d.t, d.e
	say("")
	say("Setup: statefulset-resizer (./cmd/statefulset-resizer, with the RBAC of")
	say("deploy/kubernetes/statefulset-resizer and its webhook component): the controller, and")
	say("`statefulset-resizer webhook` serving the admission webhook on 127.0.0.1 with its own")
	say("ServiceAccount; the shipped MutatingWebhookConfiguration (%s)", scenario.ShippedWebhookConfiguration)
	say("registered with that URL instead of its Service; the webhook generated the")
	say("certificates and injected the CA bundle, as it does in a cluster.")
	d.ctrl = e.StartStatefulSetResizer(t, scenario.ApplyStatefulSetResizerRBAC(t, e.Cluster, e.Namespace))
	d.wh = e.StartWebhook(t)
	d.interruptedCheck()
	d.ssr = d.wh.Process.Binary
	say("")
	say("  statefulset-resizer          pid %d", d.ctrl.Pid())
	say("                               %s %s", filepath.Base(d.ssr), strings.Join(d.ctrl.Args, " "))
	say("  statefulset-resizer webhook  pid %d, webhook %s", d.wh.Process.Pid(), d.wh.URL)
	say("                               %s %s", filepath.Base(d.ssr), strings.Join(d.wh.Process.Args, " "))
}

// step6GitOps: the README's GitOps steps on an opted-in StatefulSet.
func (d *demo) step6GitOps() {
	t, e := d.t, d.e
	d.header(6, "GitOps: a bigger volume through kubectl apply")
	d.startStatefulSetResizer()

	d.manifest = filepath.Join(t.TempDir(), stsName+".yaml")
	d.writeManifest(d.gitManifest(gitSize, false))
	var sts appsv1.StatefulSet
	if err := yaml.UnmarshalStrict([]byte(d.gitManifest(gitSize, false)), &sts); err != nil {
		t.Fatalf("the demo's manifest: %v", err)
	}
	say("")
	say("Setup: a %s volume on the driver and a PV for each of the %d replicas' PVCs, as the", gitSize, stsReplicas)
	say("external-provisioner would make them. kube-controller-manager runs the StatefulSet, PV and")
	say("garbage-collector controllers; the demo plays the scheduler and the kubelet (it marks the")
	say("pods Running).")
	e.EnsureNode(t)
	e.PrecreateVolumes(t, &sts)
	say("")
	say("The manifest in Git, %s, opted in by the label %s=%s:", d.manifest, desired.OptInLabel, desired.OptInValue)
	for _, l := range strings.Split(strings.TrimSuffix(d.gitManifest(gitSize, false), "\n"), "\n") {
		say("  | %s", l)
	}
	d.apply()
	for i := 0; i < stsReplicas; i++ {
		e.RunPod(t, stsName, i)
		e.WaitClaim(t, scenario.ClaimName(stsName, i), stepTimeout, scenario.Done(gitSize))
	}
	old, _ := e.WaitTemplateStatus(t, stsName, stepTimeout, scenario.Finished)
	podsBefore := d.showStatefulSet("The StatefulSet, its pods and PVCs:", nil)

	say("")
	say("You change the manifest as in a Git commit: a bigger volume, and a label on the StatefulSet")
	say("(any other change, such as this label, goes through with it as usual):")
	say("  metadata.labels                                     + %s", otherLabel)
	say("  volumeClaimTemplates[%s].spec.resources.requests  storage: %s -> %s", scenario.TemplateName, gitSize, gitBigger)
	d.writeManifest(d.gitManifest(gitBigger, true))
	history := e.WatchStatefulSet(t, stsName, old.ResourceVersion)
	d.apply()
	say("")
	say("The apply succeeded: without the webhook the apiserver refuses it (\"spec: Forbidden:")
	say("updates to statefulset spec for fields other than ...\"). What the apply stored (from a")
	say("watch; `kubectl get statefulset %s -n %s -o yaml` shows it until statefulset-resizer is done):", stsName, e.Namespace)
	applied := history.Wait(t, stepTimeout, "with the desired annotation", func(s *appsv1.StatefulSet) bool {
		return s.Annotations[desired.Annotation] != ""
	})
	say("  labels       %s", labelsString(applied.Labels))
	say("  template     storage %s  (the live size: the webhook put it back into the update)", templateSize(applied))
	say("  annotation   %s: %s", desired.Annotation, applied.Annotations[desired.Annotation])

	d.runWait()
	recreated := d.waitRecreated(old.UID)
	d.showHistory(history, old.UID)
	d.showStatefulSet("The StatefulSet, its pods and PVCs now:", podsBefore)
	if recreated.Labels["tier"] != "db" {
		d.t.Errorf("re-created StatefulSet labels %v, want the applied tier=db", recreated.Labels)
	}
	d.diff()
	say("")
	say("statefulset-resizer re-created the StatefulSet with the %s template at once: it stored", gitBigger)
	say("the new object in the ConfigMap %s/%s,", e.Namespace, recreate.RecordName(e.Namespace, stsName))
	say("deleted the old one with orphan propagation and uid + resourceVersion preconditions (its")
	say("finalizer %s kept it until the record held its last version),", recreate.Finalizer)
	say("created the new one and removed the record. The StatefulSet controller adopted the pods:")
	say("same uids, no restart. Then it grew both PVCs to the live template (csi-resizer expanded")
	say("the volumes), and `wait` returned. The live object equals Git from the re-create on, so")
	say("`kubectl diff`, `helm diff` and Argo CD see no drift, and a later update cannot be taken")
	say("for a revert of the change.")
}

func (d *demo) writeManifest(text string) {
	if err := os.WriteFile(d.manifest, []byte(text), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// apply runs `kubectl apply -f <manifest>` and prints its output.
func (d *demo) apply() {
	say("")
	say("You:  kubectl apply -f %s", d.manifest)
	out, err := d.e.Cluster.Kubectl(d.t, "apply", "-f", d.manifest)
	if err != nil {
		d.t.Fatalf("%v\n%s", err, out)
	}
	say("      %s", strings.TrimSpace(out))
}

// runWait runs `statefulset-resizer wait` as a pipeline would after the apply, and prints its
// output and exit code.
func (d *demo) runWait() {
	e := d.e
	say("")
	say("The pipeline waits for the volumes, as it would for a rollout (with the admin kubeconfig):")
	say("")
	say("You:  statefulset-resizer wait %s/%s --timeout %s --interval 500ms --kubeconfig %s; echo \"exit $?\"", e.Namespace, stsName, waitTimeout, e.Cluster.Kubeconfig)
	r := e.Wait(d.t, e.Cluster.Kubeconfig, stsName, "--timeout", waitTimeout)
	// Its progress goes to stderr, the final word to stdout.
	for _, l := range strings.Split(strings.TrimSpace(strings.TrimSpace(r.Stderr)+"\n"+r.Stdout), "\n") {
		say("      %s", l)
	}
	say("      exit %d", r.Code)
	say("")
	say("(done %s after it started; it followed the StatefulSet through the re-create)", r.Took.Round(100*time.Millisecond))
	if r.Code != 0 {
		d.t.Fatalf("statefulset-resizer wait: %s; want exit 0", r)
	}
}

// waitRecreated waits until the StatefulSet is another object than oldUID with the bigger
// template, no desired annotation and no re-create record left.
func (d *demo) waitRecreated(oldUID types.UID) *appsv1.StatefulSet {
	var got *appsv1.StatefulSet
	d.poll("the re-created StatefulSet", stepTimeout, func() (bool, string) {
		s, err := d.e.Client.AppsV1().StatefulSets(d.e.Namespace).Get(d.e.Ctx, stsName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error() // between the delete and the create of a re-create
		}
		got = s
		_, annotated := s.Annotations[desired.Annotation]
		_, err = d.e.Client.CoreV1().ConfigMaps(d.e.Namespace).Get(d.e.Ctx, recreate.RecordName(d.e.Namespace, stsName), metav1.GetOptions{})
		if s.UID == oldUID || templateSize(s) != gitBigger || annotated || !apierrors.IsNotFound(err) {
			return false, fmt.Sprintf("uid %s (old %s), template %s, desired annotation %v, record: %v", s.UID, oldUID, templateSize(s), annotated, err)
		}
		for i := 0; i < stsReplicas; i++ {
			pvc := d.e.PVC(d.t, scenario.ClaimName(stsName, i))
			if ok, want := scenario.Done(gitBigger)(pvc); !ok {
				return false, want + "; " + scenario.Describe(pvc)
			}
		}
		return true, ""
	})
	return got
}

// showHistory prints the StatefulSet's versions the watch saw, one line per change of uid,
// template size or desired annotation.
func (d *demo) showHistory(h *scenario.History[*appsv1.StatefulSet], oldUID types.UID) {
	say("")
	say("The StatefulSet as a watch saw it since the apply:")
	last := ""
	n := 0
	for _, s := range h.Versions() {
		ann := s.Annotations[desired.Annotation]
		if ann == "" {
			ann = "-"
		}
		l := fmt.Sprintf("uid %s  template %s  %s: %s", s.UID, templateSize(s), "desired", ann)
		if l == last {
			continue
		}
		last = l
		n++
		what := ""
		if s.UID != oldUID {
			what = "  (a new object: the re-create)"
		}
		say("  %d. %s%s", n, l, what)
	}
}

// showStatefulSet prints the StatefulSet's uid, template size and labels, its pods (uid,
// owner) and PVCs; with before, it checks that the pods are the same ones (same uids), owned by
// the current StatefulSet. It returns the pods' uids by name.
func (d *demo) showStatefulSet(title string, before map[string]types.UID) map[string]types.UID {
	t, e := d.t, d.e
	s, _ := e.StatefulSet(t, stsName)
	if before != nil {
		d.poll("the pods adopted by the re-created StatefulSet", stepTimeout, func() (bool, string) {
			for name := range before {
				if ref := metav1.GetControllerOf(e.Pod(t, name)); ref == nil || ref.UID != s.UID {
					return false, fmt.Sprintf("pod %s controller %+v, want StatefulSet uid %s", name, ref, s.UID)
				}
			}
			return true, ""
		})
	}
	say("")
	say("%s", title)
	say("  statefulset/%s  uid %s  template %s  labels %s", s.Name, s.UID, templateSize(s), labelsString(s.Labels))
	uids := map[string]types.UID{}
	for i := 0; i < stsReplicas; i++ {
		pod := e.Pod(t, scenario.PodName(stsName, i))
		uids[pod.Name] = pod.UID
		owner := "-"
		if ref := metav1.GetControllerOf(pod); ref != nil {
			owner = string(ref.UID)
		}
		same := ""
		if before != nil {
			same = "  (the same pod)"
			if before[pod.Name] != pod.UID {
				same = fmt.Sprintf("  (was %s: REPLACED)", before[pod.Name])
				t.Errorf("pod %s uid %s, was %s: the re-create must not replace pods", pod.Name, pod.UID, before[pod.Name])
			}
		}
		say("  pod/%s        uid %s  %s  owner %s%s", pod.Name, pod.UID, pod.Status.Phase, owner, same)
	}
	for i := 0; i < stsReplicas; i++ {
		pvc := e.PVC(t, scenario.ClaimName(stsName, i))
		request, capacity, _ := scenario.Storage(pvc)
		say("  pvc/%s   request %s  capacity %s", pvc.Name, request.String(), capacity.String())
	}
	return uids
}

// diff runs `kubectl diff -f <manifest>`: no difference between Git and the live object.
func (d *demo) diff() {
	say("")
	say("You:  kubectl diff -f %s; echo \"exit $?\"", d.manifest)
	out, err := d.e.Cluster.Kubectl(d.t, "diff", "-f", d.manifest)
	if out = strings.TrimSpace(out); out != "" {
		say("      %s", strings.ReplaceAll(out, "\n", "\n      "))
	}
	if err != nil {
		d.t.Errorf("kubectl diff of the manifest and the live object: %v; want no difference (exit 0)", err)
		return
	}
	say("      exit 0  (no difference)")
}

func templateSize(s *appsv1.StatefulSet) string {
	q := s.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage]
	return q.String()
}

func labelsString(labels map[string]string) string {
	var out []string
	for k, v := range labels {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// keepRunningGitOps prints how to repeat step 6 on the demo's StatefulSet.
func (d *demo) keepRunningGitOps() {
	e := d.e
	k := fmt.Sprintf("%s --kubeconfig %s", d.kubectl, e.Cluster.Kubeconfig)
	say("")
	say("GitOps (step 6) again: edit the manifest the demo wrote, apply it, wait:")
	say("")
	say("  sed -i 's/storage: %s/storage: 3Gi/' %s", gitBigger, d.manifest)
	say("  %s apply -f %s", k, d.manifest)
	say("  %s wait %s/%s --timeout %s --kubeconfig %s; echo \"exit $?\"", d.ssr, e.Namespace, stsName, waitTimeout, e.Cluster.Kubeconfig)
	say("  %s get statefulset,pods,pvc -n %s", k, e.Namespace)
	say("")
	say("  (above %s the driver refuses: the apply succeeds, wait exits 1 with the driver's message,", driverLimit)
	say("  and a smaller size in the file, applied, recovers. There is no provisioner nor kubelet")
	say("  here: keep replicas at %d and the pod template as it is.)", stsReplicas)
}
