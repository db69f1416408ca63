package helm

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// The chart deploy/helm/volume-autoscaler against the kustomize base
// deploy/kubernetes/volume-autoscaler (the source of truth for what is deployed), the command's
// own flag parsing and validation, and the monitoring kustomization's ServiceMonitor.

const (
	autoscalerChart   = "volume-autoscaler"
	autoscalerRelease = "volume-autoscaler" // the kustomize base's names
	autoscalerBase    = "../kubernetes/volume-autoscaler"
	autoscalerMonitor = "../kubernetes/monitoring/servicemonitor-volume-autoscaler.yaml"
)

func renderAutoscaler(t *testing.T, set ...string) []object {
	t.Helper()
	out, err := renderChartErr(t, autoscalerChart, autoscalerRelease, set...)
	if err != nil {
		t.Fatal(err)
	}
	return splitDocs(t, fmt.Sprintf("helm template %s --set %v", autoscalerChart, set), out)
}

// The value sets the tests below render besides the defaults: every value the chart reads.
var autoscalerValueSets = [][]string{
	{"leaderElection.enabled=false"},
	{"kubelet.insecureSkipTLSVerify=true"},
	{"kubelet.certificateAuthority.secret=kubelet-ca", "kubelet.certificateAuthority.key=bundle.pem"},
	{"serviceAccount.create=false", "serviceAccount.name=existing"},
	{"fullnameOverride=va", "metrics.port=9090", "metrics.service.enabled=false"},
	{"interval=30s", "dryRun=true", "allStorageClasses=true", "defaults.threshold=5Gi", "defaults.limit=100Gi",
		"kubelet.timeout=5s", "kubelet.concurrency=4", "extraArgs={--kube-api-qps=10}", "replicas=2"},
}

// The chart grants exactly the kustomize base's permissions (a rule added to one and not the other
// fails here), never nodes/proxy nor a wildcard whatever the values, and without leader election
// no Lease Role.
func TestAutoscalerChartRBACEqualsKustomizeBase(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	want := roles(t, kustomizeObjects(t, autoscalerBase))
	if len(want) != 2 {
		t.Fatalf("the kustomize base %s has roles %v, want the ClusterRole and the leader-election Role", autoscalerBase, want)
	}
	for _, ps := range want {
		for _, p := range ps {
			if strings.Contains(p, "nodes/proxy") || strings.Contains(p, "*") {
				t.Errorf("the kustomize base grants %q: the autoscaler reads nodes/stats, never the node proxy", p)
			}
		}
	}
	diffRoles(t, "default values", roles(t, renderAutoscaler(t)), want)

	noLeader := map[string][]string{}
	for key, ps := range want {
		if !slices.Contains(ps, "update coordination.k8s.io/leases") {
			noLeader[key] = ps
		}
	}
	diffRoles(t, "leaderElection.enabled=false", roles(t, renderAutoscaler(t, "leaderElection.enabled=false")), noLeader)

	for _, set := range autoscalerValueSets {
		for key, ps := range roles(t, renderAutoscaler(t, set...)) {
			for _, p := range ps {
				if strings.Contains(p, "nodes/proxy") || strings.Contains(p, "*") {
					t.Errorf("--set %v: %s grants %q", set, key, p)
				}
			}
		}
	}
}

// Every role is bound to the chart's ServiceAccount (or the existing one named) in the release
// namespace, and every binding refers to a rendered role.
func TestAutoscalerChartBindings(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	for _, c := range []struct {
		set     []string
		sa      string
		created []string
	}{
		{nil, autoscalerRelease, []string{autoscalerRelease}},
		{[]string{"serviceAccount.create=false", "serviceAccount.name=existing"}, "existing", nil},
		{[]string{"serviceAccount.name=custom"}, "custom", []string{"custom"}},
		{[]string{"fullnameOverride=va"}, "va", []string{"va"}},
	} {
		t.Run(strings.Join(c.set, ","), func(t *testing.T) {
			objs := renderAutoscaler(t, c.set...)
			checkBindings(t, objs, c.created, func(string) string { return c.sa })
			if sa := autoscalerDeployment(t, objs).Spec.Template.Spec.ServiceAccountName; sa != c.sa {
				t.Errorf("the Deployment runs as %q, want %q (the bound one)", sa, c.sa)
			}
		})
	}
}

// With the release name volume-autoscaler and the default values, the chart renders exactly the
// kustomize base's objects, under the same names and labels, with the same Deployment (pod and
// container settings, the kubelet CA volume, the base's args among the chart's) and Service.
func TestAutoscalerChartMatchesKustomizeBaseObjects(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	objs := renderAutoscaler(t)
	baseObjs := kustomizeObjects(t, autoscalerBase)
	var got, want []string
	for _, o := range objs {
		got = append(got, o.key())
	}
	for _, b := range baseObjs {
		want = append(want, b.key())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the chart renders %v, the kustomize base has %v", got, want)
	}
	checkBaseMetadata(t, objs, baseObjs)

	var bd, cd appsv1.Deployment
	decode(t, find(t, baseObjs, "Deployment", autoscalerRelease), &bd)
	cd = autoscalerDeployment(t, objs)
	bp, cp := bd.Spec.Template.Spec, cd.Spec.Template.Spec
	if len(cp.Containers) != 1 || len(bp.Containers) != 1 {
		t.Fatalf("containers: chart %d, base %d, want 1", len(cp.Containers), len(bp.Containers))
	}
	bc, cc := bp.Containers[0], cp.Containers[0]
	for field, pair := range map[string][2]any{
		"replicas":                      {bd.Spec.Replicas, cd.Spec.Replicas},
		"revisionHistoryLimit":          {bd.Spec.RevisionHistoryLimit, cd.Spec.RevisionHistoryLimit},
		"strategy":                      {bd.Spec.Strategy, cd.Spec.Strategy},
		"serviceAccountName":            {bp.ServiceAccountName, cp.ServiceAccountName},
		"terminationGracePeriodSeconds": {bp.TerminationGracePeriodSeconds, cp.TerminationGracePeriodSeconds},
		"pod securityContext":           {bp.SecurityContext, cp.SecurityContext},
		"volumes":                       {bp.Volumes, cp.Volumes},
		"affinity":                      {bp.Affinity, cp.Affinity},
		"container name":                {bc.Name, cc.Name},
		"image":                         {bc.Image, cc.Image},
		"imagePullPolicy":               {bc.ImagePullPolicy, cc.ImagePullPolicy},
		"command":                       {bc.Command, cc.Command},
		"env":                           {bc.Env, cc.Env},
		"ports":                         {bc.Ports, cc.Ports},
		"livenessProbe":                 {bc.LivenessProbe, cc.LivenessProbe},
		"readinessProbe":                {bc.ReadinessProbe, cc.ReadinessProbe},
		"volumeMounts":                  {bc.VolumeMounts, cc.VolumeMounts},
		"resources":                     {bc.Resources, cc.Resources},
		"container securityContext":     {bc.SecurityContext, cc.SecurityContext},
		"terminationMessagePolicy":      {bc.TerminationMessagePolicy, cc.TerminationMessagePolicy},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Errorf("Deployment: %s differs from the kustomize base:\n chart: %+v\n base:  %+v", field, pair[1], pair[0])
		}
	}
	for _, a := range bc.Args {
		if !slices.Contains(cc.Args, a) {
			t.Errorf("Deployment args %q lack the kustomize base's %q", cc.Args, a)
		}
	}
	for k, v := range bd.Spec.Selector.MatchLabels {
		if cd.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("Deployment selector %v does not include the base's %s=%s", cd.Spec.Selector.MatchLabels, k, v)
		}
	}

	var bs, cs corev1.Service
	decode(t, find(t, baseObjs, "Service", autoscalerRelease+"-metrics"), &bs)
	decode(t, find(t, objs, "Service", autoscalerRelease+"-metrics"), &cs)
	if bs.Spec.ClusterIP != cs.Spec.ClusterIP || !reflect.DeepEqual(bs.Spec.Ports, cs.Spec.Ports) {
		t.Errorf("metrics Service spec %+v, the base has %+v", cs.Spec, bs.Spec)
	}
}

func autoscalerDeployment(t *testing.T, objs []object) appsv1.Deployment {
	t.Helper()
	ds := decodeKind[appsv1.Deployment](t, objs, "Deployment")
	if len(ds) != 1 {
		t.Fatalf("%d Deployments rendered, want 1", len(ds))
	}
	return ds[0]
}

// The args each value gives, and the CA volume they name.
func TestAutoscalerChartArgs(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	ca := "--kubelet-certificate-authority=/etc/kubelet-ca/ca.crt"
	logs := []string{"--logging-format=text", "--v=0"}
	configMap := &corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}}
	for _, c := range []struct {
		set  []string
		args []string
		// volume is the kubelet-ca volume's source; nil: no volume and no mount.
		volume *corev1.VolumeSource
	}{
		{nil, slices.Concat([]string{"--leader-election", "--http-endpoint=:8080", ca, "--workers=10"}, logs), configMap},
		{[]string{"leaderElection.enabled=false", "metrics.port=9090", "workers=3", "logFormat=json", "logVerbosity=4"},
			[]string{"--http-endpoint=:9090", ca, "--workers=3", "--logging-format=json", "--v=4"}, configMap},
		{[]string{"kubelet.insecureSkipTLSVerify=true"},
			slices.Concat([]string{"--leader-election", "--http-endpoint=:8080", "--kubelet-insecure-tls", "--workers=10"}, logs), nil},
		{[]string{"kubelet.certificateAuthority.secret=kubelet-ca", "kubelet.certificateAuthority.key=bundle.pem"},
			slices.Concat([]string{"--leader-election", "--http-endpoint=:8080", "--kubelet-certificate-authority=/etc/kubelet-ca/bundle.pem", "--workers=10"}, logs),
			&corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "kubelet-ca"}}},
		{[]string{"kubelet.certificateAuthority.configMap=kubelet-serving-ca"},
			slices.Concat([]string{"--leader-election", "--http-endpoint=:8080", ca, "--workers=10"}, logs),
			&corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kubelet-serving-ca"}}}},
		{[]string{"interval=30s", "dryRun=true", "allStorageClasses=true",
			"kubelet.preferredAddressTypes=InternalIP", "kubelet.timeout=5s", "kubelet.concurrency=4",
			"defaults.threshold=5Gi", "defaults.inodesThreshold=7.5%", "defaults.increase=20%", "defaults.minIncrease=2Gi",
			"defaults.limit=100Gi", "defaults.cooldown=6h", "defaults.resizeWait=1h", "extraArgs={--kube-api-qps=10}"},
			slices.Concat([]string{"--leader-election", "--http-endpoint=:8080", ca, "--workers=10", "--dry-run", "--all-storage-classes",
				"--interval=30s", "--kubelet-preferred-address-types=InternalIP", "--kubelet-timeout=5s", "--kubelet-concurrency=4",
				"--default-threshold=5Gi", "--default-inodes-threshold=7.5%", "--default-increase=20%", "--default-min-increase=2Gi",
				"--default-limit=100Gi", "--cooldown=6h", "--resize-wait=1h"}, logs, []string{"--kube-api-qps=10"}), configMap},
	} {
		t.Run(strings.Join(c.set, ","), func(t *testing.T) {
			d := autoscalerDeployment(t, renderAutoscaler(t, c.set...))
			ctr := d.Spec.Template.Spec.Containers[0]
			if !slices.Equal(ctr.Args, c.args) {
				t.Errorf("args\n got: %q\nwant: %q", ctr.Args, c.args)
			}
			vols, mounts := d.Spec.Template.Spec.Volumes, ctr.VolumeMounts
			if c.volume == nil {
				if len(vols) != 0 || len(mounts) != 0 {
					t.Errorf("volumes %+v, mounts %+v: want none without a CA", vols, mounts)
				}
				return
			}
			want := []corev1.Volume{{Name: "kubelet-ca", VolumeSource: *c.volume}}
			wantMounts := []corev1.VolumeMount{{Name: "kubelet-ca", MountPath: "/etc/kubelet-ca", ReadOnly: true}}
			if !reflect.DeepEqual(vols, want) || !reflect.DeepEqual(mounts, wantMounts) {
				t.Errorf("volumes %+v mounts %+v, want %+v %+v", vols, mounts, want, wantMounts)
			}
		})
	}
}

// The args of every value set are accepted by the command itself: flags it knows, values it
// parses and that pass its validation (exit 2 otherwise). Given an unreadable kubeconfig the
// command then stops at its first API step with exit 1, so nothing here needs a cluster.
func TestAutoscalerChartArgsAcceptedByCommand(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	binary := framework.BuildCommand(t, "volume-autoscaler")
	kubeconfig := filepath.Join(t.TempDir(), "missing-kubeconfig")
	for _, set := range append([][]string{nil}, autoscalerValueSets...) {
		args := autoscalerDeployment(t, renderAutoscaler(t, set...)).Spec.Template.Spec.Containers[0].Args
		code, _, stderr := framework.RunCommand(t, binary, append(slices.Clone(args), "--kubeconfig="+kubeconfig)...)
		if code != 1 || !strings.Contains(stderr, "missing-kubeconfig") {
			t.Errorf("--set %v: volume-autoscaler %q exited %d, want 1 at the kubeconfig (its flags and their values accepted):\n%s", set, args, code, stderr)
		}
	}
	// The check can fail: a value the command refuses is exit 2 naming the flag.
	args := autoscalerDeployment(t, renderAutoscaler(t, "defaults.threshold=lots")).Spec.Template.Spec.Containers[0].Args
	if code, _, stderr := framework.RunCommand(t, binary, append(args, "--kubeconfig="+kubeconfig)...); code != 2 || !strings.Contains(stderr, "--default-threshold") {
		t.Errorf("defaults.threshold=lots: exit %d, want 2 naming --default-threshold:\n%s", code, stderr)
	}
}

// The pod settings a user sets reach the Deployment.
func TestAutoscalerChartPodValues(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	d := autoscalerDeployment(t, renderAutoscaler(t,
		"image.repository=registry.local/csi-resizer", "image.tag=v1.2.3", "image.pullPolicy=Always",
		"imagePullSecrets[0].name=pull", "priorityClassName=system-cluster-critical",
		"nodeSelector.role=infra", "tolerations[0].key=infra", "tolerations[0].operator=Exists",
		"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=zone",
		"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
		"podSecurityContext.runAsUser=1000", "podSecurityContext.fsGroup=2000",
		"resources.limits.memory=1Gi", "podLabels.team=storage", "podAnnotations.note=x", "replicas=2"))
	p := d.Spec.Template.Spec
	c := p.Containers[0]
	for what, ok := range map[string]bool{
		"image":             c.Image == "registry.local/csi-resizer:v1.2.3" && c.ImagePullPolicy == corev1.PullAlways,
		"imagePullSecrets":  reflect.DeepEqual(p.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "pull"}}),
		"priorityClassName": p.PriorityClassName == "system-cluster-critical",
		"nodeSelector":      reflect.DeepEqual(p.NodeSelector, map[string]string{"role": "infra"}),
		"tolerations":       reflect.DeepEqual(p.Tolerations, []corev1.Toleration{{Key: "infra", Operator: corev1.TolerationOpExists}}),
		"affinity":          p.Affinity != nil && p.Affinity.NodeAffinity != nil && p.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key == "zone",
		"podSecurityContext": p.SecurityContext != nil && *p.SecurityContext.RunAsUser == 1000 && *p.SecurityContext.FSGroup == 2000 &&
			*p.SecurityContext.RunAsNonRoot && p.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault,
		"resources":      c.Resources.Limits.Memory().String() == "1Gi" && c.Resources.Requests.Cpu().String() == "10m",
		"pod labels":     d.Spec.Template.Labels["team"] == "storage" && d.Spec.Selector.MatchLabels["team"] == "",
		"podAnnotations": d.Spec.Template.Annotations["note"] == "x",
		"replicas":       *d.Spec.Replicas == 2 && slices.Contains(c.Args, "--leader-election"),
	} {
		if !ok {
			t.Errorf("%s not as set: %+v", what, d.Spec)
		}
	}
}

// Bad values fail the render with a message naming the value and the fix.
func TestAutoscalerChartRefusesBadValues(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	for _, c := range []struct {
		set  []string
		want string
	}{
		{[]string{"replicas=2", "leaderElection.enabled=false"}, "replicas=2 needs leaderElection.enabled=true"},
		{[]string{"serviceAccount.create=false"}, "serviceAccount.name is required when serviceAccount.create=false"},
		{[]string{"logFormat=xml"}, "logFormat=xml: want text or json"},
		{[]string{"kubelet.insecureSkipTLSVerify=true", "kubelet.certificateAuthority.secret=ca"}, "kubelet.insecureSkipTLSVerify=true and kubelet.certificateAuthority.secret=ca exclude each other"},
		{[]string{"kubelet.certificateAuthority.configMap="}, "no CA for the kubelets' serving certificates"},
		{[]string{"kubelet.certificateAuthority.key="}, "kubelet.certificateAuthority.key is empty"},
	} {
		_, err := renderChartErr(t, autoscalerChart, autoscalerRelease, c.set...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %v: error %v, want one containing %q", c.set, err, c.want)
		}
	}
}

// The ServiceMonitor of deploy/kubernetes/monitoring scrapes the chart's metrics Service (its
// labels, its port name), as it does the kustomize base's, and that Service selects the
// Deployment's pods on the container's metrics port: the chart leaves monitoring to that
// kustomization, as the statefulset-resizer chart does.
func TestAutoscalerChartServiceMonitorSelectsService(t *testing.T) {
	helmBinary(t) // skips, or fails under CI=true, without helm
	data, err := os.ReadFile(autoscalerMonitor)
	if err != nil {
		t.Fatal(err)
	}
	var sm struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Port string `json:"port"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	monitors := splitDocs(t, autoscalerMonitor, data)
	if len(monitors) != 1 {
		t.Fatalf("%s: %d objects, want the ServiceMonitor", autoscalerMonitor, len(monitors))
	}
	if err := yaml.Unmarshal(monitors[0].doc, &sm); err != nil {
		t.Fatal(err)
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 || len(sm.Spec.Endpoints) != 1 {
		t.Fatalf("%s: selector %v, endpoints %+v", autoscalerMonitor, sm.Spec.Selector.MatchLabels, sm.Spec.Endpoints)
	}
	for _, set := range [][]string{nil, {"fullnameOverride=va", "metrics.port=9090"}} {
		objs := renderAutoscaler(t, set...)
		services := decodeKind[corev1.Service](t, objs, "Service")
		if len(services) != 1 {
			t.Fatalf("--set %v: %d Services, want the metrics Service", set, len(services))
		}
		svc := services[0]
		if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
			t.Errorf("--set %v: the ServiceMonitor selects %v, the Service %s has labels %v", set, sm.Spec.Selector.MatchLabels, svc.Name, svc.Labels)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != sm.Spec.Endpoints[0].Port {
			t.Errorf("--set %v: the ServiceMonitor scrapes port %q, the Service has %+v", set, sm.Spec.Endpoints[0].Port, svc.Spec.Ports)
		}
		d := autoscalerDeployment(t, objs)
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("--set %v: the Service selects %v, the pods have %v", set, svc.Spec.Selector, d.Spec.Template.Labels)
		}
		var named bool
		for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
			named = named || (p.Name == svc.Spec.Ports[0].TargetPort.StrVal && fmt.Sprint(p.ContainerPort) == strings.TrimPrefix(flagValue(d.Spec.Template.Spec.Containers[0].Args, "http-endpoint"), ":"))
		}
		if !named {
			t.Errorf("--set %v: the Service targets %v, which is not the container port of --http-endpoint", set, svc.Spec.Ports[0].TargetPort)
		}
	}
}
