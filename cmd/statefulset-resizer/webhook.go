package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-resizer/csi-resizer/internal/cli"
	"github.com/csi-resizer/csi-resizer/internal/logging"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/webhook"
)

const webhookUsage = `Usage: statefulset-resizer webhook [--webhook-port 9443] [flags]

Serves statefulset-resizer's mutating admission webhook (HTTPS, path ` + webhook.Path + `):
an update of an opted-in StatefulSet that changes its volumeClaimTemplates' sizes,
classes, labels or annotations keeps the live templates and records the new ones
in the annotation csi-resizer.io/desired-volume-claim-templates, which the
controller (statefulset-resizer without a subcommand, another Deployment) acts
on. Every replica answers; there is no leader election. The decision is made
from the admission request alone: the only API calls are those of the
generated certificate (its Secret, the caBundle of --webhook-configuration-name),
none with --webhook-tls-cert-file. docs/statefulset-resizer.md, "Webhook".

Flags:
`

// webhookModeOptions are the flags of the webhook subcommand: the webhook's own, plus the
// client, HTTP endpoint and logging flags it shares with the controller.
type webhookModeOptions struct {
	showVersion bool
	api         cli.API
	http        cli.HTTP
	webhook     webhookOptions
	logging     *logging.Logging
}

func addWebhookModeFlags(fs *pflag.FlagSet) *webhookModeOptions {
	o := &webhookModeOptions{logging: logging.New(command + " webhook")}
	fs.BoolVar(&o.showVersion, "version", false, "Show version.")
	o.api.AddFlags(fs)
	o.http.AddFlags(fs, "/healthz")
	addWebhookFlags(fs, &o.webhook)
	o.logging.AddFlags(fs)
	return o
}

// controllerOnly names, for a flag the webhook subcommand lacks, the controller's flag it is.
func controllerOnly(name string) string {
	if !isControllerFlag(name) {
		return ""
	}
	if strings.HasPrefix(name, "leader-election") {
		return "is a flag of the controller (statefulset-resizer without a subcommand); the webhook has no leader election: every replica answers the apiserver"
	}
	return "is a flag of the controller (statefulset-resizer without a subcommand), not of the webhook subcommand (see webhook --help)"
}

// isControllerFlag reports whether name is one of the controller's flags.
func isControllerFlag(name string) bool {
	fs := pflag.NewFlagSet(command, pflag.ContinueOnError)
	addFlags(fs)
	return fs.Lookup(name) != nil
}

// webhookOnly names, for a flag the controller lacks, the webhook subcommand that has it: the
// controller served the webhook itself (--webhook-port) before the two were split.
func webhookOnly(name string) string {
	if !strings.HasPrefix(name, "webhook-") {
		return ""
	}
	return "the admission webhook is not served by the controller any more; run it as its own process (its own Deployment and ServiceAccount): statefulset-resizer webhook --" + name + "=... (docs/statefulset-resizer.md, \"Webhook\")"
}

// runWebhook is the webhook subcommand; it returns the exit code. Start-up as the
// controller's: parse (exit 2), --help / --version, apply logging, validate, run.
func runWebhook(args []string) int {
	fs := pflag.NewFlagSet(command+" webhook", pflag.ContinueOnError)
	o := addWebhookModeFlags(fs)
	return cli.Start{Command: command, Version: version, Usage: webhookUsage, Flags: fs, Logging: o.logging,
		ShowVersion: &o.showVersion, Elsewhere: controllerOnly, ArgsHint: "see webhook --help", LogValues: []any{"mode", "webhook"},
		Validate: o.validate, Run: func(ctx context.Context) error { return serveWebhookMode(ctx, o) }}.Main(args)
}

func (o *webhookModeOptions) validate() error {
	if err := o.api.Validate(); err != nil {
		return err
	}
	if err := o.http.Validate(); err != nil {
		return err
	}
	switch {
	}
	return o.webhook.validate()
}

// serveWebhookMode serves the webhook (and the HTTP endpoint) until ctx ends, then drains
// for --webhook-shutdown-delay; a failure of the server stops it at once.
func serveWebhookMode(ctx context.Context, o *webhookModeOptions) error {
	var client kubernetes.Interface
	if o.webhook.certFile == "" {
		// Only the generated certificate calls the API (webhook.CertManager).
		var err error
		if _, client, err = o.api.Client(command + "-webhook"); err != nil {
			return err
		}
	}
	if o.http.Endpoint != "" {
		defer cli.ServeHTTP(klog.FromContext(ctx), o.http.Endpoint, o.http.MetricsPath, http.NewServeMux()).Close()
	}
	// stopping ends with the signal, or when the server fails.
	stopping, stop := context.WithCancel(ctx)
	defer stop()
	served, err := startWebhook(stopping, &o.webhook, client, stop)
	if err != nil {
		return err
	}
	return <-served
}

// webhookOptions are the flags of the admission webhook (docs/statefulset-resizer.md, "Webhook").
type webhookOptions struct {
	port              int
	serviceName       string
	namespace         string
	hosts             hostList
	secretName        string
	configurationName string
	certFile, keyFile string
	checkInterval     time.Duration
	// shutdownDelay is how long the webhook is still served after the stop, while its
	// readiness fails (webhook.Serve).
	shutdownDelay time.Duration
}

// certificateValidity is the lifetime of a generated certificate; it is
// renewed after two thirds of it.
const certificateValidity = 365 * 24 * time.Hour

func addWebhookFlags(fs *pflag.FlagSet, o *webhookOptions) {
	fs.IntVar(&o.port, "webhook-port", 9443, "Port of the admission webhook (HTTPS, path "+webhook.Path+" and readiness "+webhook.ReadyPath+"), served by every replica.")
	fs.StringVar(&o.serviceName, "webhook-service-name", "statefulset-resizer", "Service through which the apiserver calls the webhook: the generated serving certificate is for <name>.<namespace>.svc.")
	fs.StringVar(&o.namespace, "webhook-namespace", "", "Namespace of the webhook's Service and certificate Secret. Defaults to the pod's namespace (POD_NAMESPACE, or the service account's).")
	fs.Var(&o.hosts, "webhook-host", "Extra DNS name or IP address of the generated serving certificate (repeatable, or a comma-separated list), e.g. 127.0.0.1 for a webhook registered by URL.")
	fs.StringVar(&o.secretName, "webhook-secret-name", "statefulset-resizer-webhook-tls", "Secret (in the webhook namespace) holding the generated CA and serving certificate, shared by the replicas.")
	fs.StringVar(&o.configurationName, "webhook-configuration-name", "statefulset-resizer", "MutatingWebhookConfiguration into which the generated CA bundle is injected.")
	fs.StringVar(&o.certFile, "webhook-tls-cert-file", "", "Serving certificate of the webhook (PEM), e.g. from cert-manager, re-read when it changes. With --webhook-tls-private-key-file, replaces the generated certificates: no Secret is written and no CA bundle injected.")
	fs.StringVar(&o.keyFile, "webhook-tls-private-key-file", "", "Private key (PEM) of --webhook-tls-cert-file.")
	fs.DurationVar(&o.checkInterval, "webhook-certificate-check-interval", time.Minute, "How often the generated certificates and the injected CA bundle are checked (renewal, a configuration re-applied without the bundle).")
	fs.DurationVar(&o.shutdownDelay, "webhook-shutdown-delay", 10*time.Second, "After SIGTERM, how long the webhook is still served while its readiness ("+webhook.ReadyPath+") fails, so that the Service stops sending the apiserver's calls to this replica before it goes. The pod's terminationGracePeriodSeconds must exceed it: the shipped manifests give 20s more (requests under way, 5s at most, and margin).")
}

func (o *webhookOptions) validate() error {
	files := o.certFile != "" || o.keyFile != ""
	switch {
	case o.port < 1 || o.port > 65535:
		return fmt.Errorf("--webhook-port must be between 1 and 65535, got %d", o.port)
	case o.shutdownDelay < 0:
		return fmt.Errorf("--webhook-shutdown-delay must not be negative, got %s", o.shutdownDelay)
	case (o.certFile == "") != (o.keyFile == ""):
		return fmt.Errorf("--webhook-tls-cert-file and --webhook-tls-private-key-file go together: give both, or neither to have the certificates generated")
	case files && len(o.hosts) > 0:
		return fmt.Errorf("--webhook-host is for generated certificates; with --webhook-tls-cert-file the file's certificate is served as it is")
	case !files && o.serviceName == "":
		return fmt.Errorf("--webhook-service-name must not be empty: the generated certificate is for <name>.<namespace>.svc")
	case !files && (o.secretName == "" || o.configurationName == ""):
		return fmt.Errorf("--webhook-secret-name and --webhook-configuration-name must not be empty with generated certificates")
	case o.checkInterval <= 0:
		return fmt.Errorf("--webhook-certificate-check-interval must be positive, got %s", o.checkInterval)
	}
	return nil
}

// startWebhook listens on the webhook port (so that a port in use fails the
// start) and serves the webhook in the background until --webhook-shutdown-delay
// after stopping ends, draining meanwhile. Serve's result is sent on served; a
// failure of the server also calls stop, to stop the process.
func startWebhook(stopping context.Context, o *webhookOptions, client kubernetes.Interface, stop func()) (served <-chan error, err error) {
	getCertificate, err := certificateSource(stopping, o, client)
	if err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(o.port)))
	if err != nil {
		return nil, fmt.Errorf("listening on --webhook-port=%d: %w", o.port, err)
	}
	serving, endServing := context.WithCancel(context.WithoutCancel(stopping))
	context.AfterFunc(stopping, func() {
		klog.FromContext(stopping).Info("Stopping: the webhook is still served meanwhile", "for", o.shutdownDelay)
		time.AfterFunc(o.shutdownDelay, endServing)
	})
	result := make(chan error, 1)
	go func() {
		defer endServing()
		err := webhook.Serve(serving, listener, getCertificate, stopping.Done())
		if err != nil {
			stop()
		}
		result <- err
	}()
	return result, nil
}

// certificateSource is the files, or else the generated certificates, which
// it starts keeping in the background.
func certificateSource(ctx context.Context, o *webhookOptions, client kubernetes.Interface) (func(*tls.ClientHelloInfo) (*tls.Certificate, error), error) {
	if o.certFile != "" {
		f := &webhook.FileCertificate{CertFile: o.certFile, KeyFile: o.keyFile}
		if err := f.Load(); err != nil {
			return nil, err
		}
		return f.GetCertificate, nil
	}
	namespace := o.namespace
	if namespace == "" {
		namespace = podNamespace()
	}
	if namespace == "" {
		return nil, fmt.Errorf("the webhook namespace is unknown out of a cluster: set --webhook-namespace (or POD_NAMESPACE)")
	}
	hosts := []string{o.serviceName + "." + namespace + ".svc", o.serviceName + "." + namespace + ".svc.cluster.local"}
	m := &webhook.CertManager{
		Client: client, SecretNamespace: namespace, SecretName: o.secretName, ConfigurationName: o.configurationName,
		Hosts: append(hosts, o.hosts...), Validity: certificateValidity, Interval: o.checkInterval, Clock: clock.RealClock{},
	}
	go m.Run(ctx)
	return m.GetCertificate, nil
}

// podNamespace is the pod's namespace: POD_NAMESPACE, or the service account's.
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		klog.V(2).InfoS("No service account namespace", "err", err)
		return ""
	}
	return strings.TrimSpace(string(b))
}

// hostList is a repeatable flag of DNS names and IP addresses, each value a
// comma-separated list.
type hostList []string

func (h *hostList) String() string { return strings.Join(*h, ",") }

// Type names the value in --help.
func (h *hostList) Type() string { return "hosts" }

func (h *hostList) Set(value string) error {
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" || strings.ContainsAny(item, " /:") && net.ParseIP(item) == nil {
			return fmt.Errorf("malformed host %q, want a DNS name or an IP address", item)
		}
		*h = append(*h, item)
	}
	return nil
}
