package scenario

// statefulset-resizer's admission webhook on the real apiserver: `statefulset-resizer webhook`
// runs as its own process with the webhook's ServiceAccount (WebhookKubeconfig), serves it on
// 127.0.0.1 with certificates it generates, the shipped MutatingWebhookConfiguration is
// registered with a URL instead of its Service reference (there is no Service without a
// cluster network), and the process injects its CA bundle into it, as it does in a cluster. The
// controller, when a test needs it, is another process (StartStatefulSetResizer).

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/desired"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/webhook"
	"github.com/csi-resizer/csi-resizer/test/framework"
)

// ShippedWebhookConfiguration is the MutatingWebhookConfiguration of the kustomize base,
// relative to the repository root.
var ShippedWebhookConfiguration = filepath.Join("deploy", "kubernetes", "statefulset-resizer", "webhook", "mutatingwebhookconfiguration.yaml")

// Webhook is a `statefulset-resizer webhook` process serving the admission webhook, registered
// with the apiserver by URL.
type Webhook struct {
	Process *framework.Process
	// URL is what the apiserver calls: https://127.0.0.1:<port><webhook.Path>.
	URL string
	// Configuration is the name of the registered MutatingWebhookConfiguration.
	Configuration string
}

// StartWebhook runs `statefulset-resizer webhook` (StartWebhookProcesses) serving on 127.0.0.1
// with generated certificates (Secret in the env's namespace, bundle checked every second,
// served 1 s after SIGTERM: there is no Service to drain here), followed by args; registers the
// shipped configuration by URL (RegisterShippedWebhook) and waits until the apiserver calls the
// webhook (WaitWebhookActive). ApplyStatefulSetResizerRBAC must have been applied in the env's
// namespace.
func (e *Env) StartWebhook(t testing.TB, args ...string) *Webhook {
	t.Helper()
	port := framework.FreePort(t)
	p := e.StartWebhookProcesses(t, append(WebhookArgs(e.Namespace, port), args...))[0]
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.Path)
	w := &Webhook{Process: p, URL: url, Configuration: e.RegisterShippedWebhook(t, url)}
	e.WaitWebhookActive(t)
	return w
}

// WebhookArgs are the webhook flags of StartWebhook: port on 127.0.0.1, generated certificates
// in namespace ns checked every second, a 1 s drain.
func WebhookArgs(ns string, port int) []string {
	return []string{fmt.Sprintf("--webhook-port=%d", port), "--webhook-host=127.0.0.1", "--webhook-shutdown-delay=1s",
		"--webhook-namespace=" + ns, "--webhook-certificate-check-interval=1s"}
}

// StartWebhookProcesses runs one `statefulset-resizer webhook` process per argument list, all
// started before waiting for any (replicas), as the webhook's ServiceAccount:
//
//	webhook --kubeconfig=<WebhookKubeconfig> --http-endpoint=127.0.0.1:<free port> -v=4
//
// followed by the args, and waits until each serves /healthz. As for the controller, a log
// line saying the apiserver refused it something fails the test when it ends.
func (e *Env) StartWebhookProcesses(t testing.TB, argLists ...[]string) []*framework.Process {
	t.Helper()
	kubeconfig := WebhookKubeconfig(t, e.Cluster, e.Namespace)
	return e.startProcesses(t, "statefulset-resizer-webhook", func(addr string) []string {
		return []string{"webhook", "--kubeconfig=" + kubeconfig, "--http-endpoint=" + addr, "-v=4"}
	}, argLists)
}

// RegisterShippedWebhook creates the shipped MutatingWebhookConfiguration with every webhook's
// Service reference replaced by url, waits until statefulset-resizer has injected the CA bundle
// into every webhook, and returns the configuration's name.
func (e *Env) RegisterShippedWebhook(t testing.TB, url string) string {
	t.Helper()
	return e.registerShippedWebhook(t, url, nil)
}

// RegisterShippedWebhookWithCA creates the shipped MutatingWebhookConfiguration with every
// webhook calling url and trusting caBundle, as cert-manager's CA injector would fill it for a
// statefulset-resizer serving certificate files, and returns its name.
func (e *Env) RegisterShippedWebhookWithCA(t testing.TB, url string, caBundle []byte) string {
	t.Helper()
	return e.registerShippedWebhook(t, url, caBundle)
}

// registerShippedWebhook registers the shipped configuration calling url, with caBundle, or,
// when it is nil, waits for statefulset-resizer to inject its own.
func (e *Env) registerShippedWebhook(t testing.TB, url string, caBundle []byte) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, ShippedWebhookConfiguration))
	if err != nil {
		t.Fatal(err)
	}
	var config admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(data, &config); err != nil {
		t.Fatalf("%s: %v", ShippedWebhookConfiguration, err)
	}
	for i := range config.Webhooks {
		if got := config.Webhooks[i].ClientConfig.Service; got == nil || got.Path == nil || *got.Path != webhook.Path {
			t.Fatalf("shipped webhook %s does not call path %s: %+v", config.Webhooks[i].Name, webhook.Path, got)
		}
		config.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
	}
	configs := e.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := configs.Create(e.Ctx, &config, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the webhook configuration %s: %v", config.Name, err)
	}
	if caBundle != nil {
		return config.Name
	}
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		c, err := configs.Get(e.Ctx, config.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, wh := range c.Webhooks {
			if len(wh.ClientConfig.CABundle) == 0 {
				return false, "no caBundle injected into " + wh.Name
			}
		}
		return true, ""
	})
	return config.Name
}

// WaitWebhookActive waits until the apiserver calls the webhook (it picks up a new
// configuration within a few seconds): a server dry-run update raising the template size of an
// opted-in probe StatefulSet (no replicas) is accepted, which it is only when the webhook
// answers. A dry run changes nothing, so statefulset-resizer has nothing to do for the probe,
// which is deleted afterwards.
func (e *Env) WaitWebhookActive(t testing.TB) {
	t.Helper()
	sets := e.Client.AppsV1().StatefulSets(e.Namespace)
	probe := e.NewStatefulSet(StatefulSetOptions{Name: "webhook-probe", Size: "1Gi"})
	probe.Labels = map[string]string{desired.OptInLabel: desired.OptInValue}
	if _, err := sets.Create(e.Ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create StatefulSet %s: %v", probe.Name, err)
	}
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		cur, err := sets.Get(e.Ctx, probe.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		cur.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[v1.ResourceStorage] = resource.MustParse("2Gi")
		if _, err := sets.Update(e.Ctx, cur, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return false, "a dry-run size change of the probe: " + err.Error()
		}
		return true, ""
	})
	if err := sets.Delete(e.Ctx, probe.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete StatefulSet %s: %v", probe.Name, err)
	}
}
