// Command statefulset-resizer reconciles the volume claim templates of
// StatefulSets with their PVCs (KEP-661, with KEP-1790 recovery), and its
// `wait` subcommand blocks a CI/CD job until a StatefulSet's volumes are
// resized. See docs/statefulset-resizer.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/leaderelection"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection" // leader_election_master_status
	_ "k8s.io/component-base/metrics/prometheus/workqueue"               // workqueue_* metrics of the queue
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/controller"
	ssmetrics "github.com/csi-resizer/csi-resizer/pkg/statefulset/metrics"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const command = "statefulset-resizer"

func main() {
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Main is the whole command; it returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "wait" {
		return runWait(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet(command, flag.ContinueOnError)
	opts := addFlags(fs)
	klog.InitFlags(fs)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "Usage: %s [flags]\n       %s wait NAMESPACE/NAME [--timeout 5m] [--kubeconfig FILE]\n\nFlags:\n", command, command)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "%s: %v (see --help)\n", command, err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (the only subcommand is \"wait\"; see --help)\n", command, fs.Arg(0))
		return 2
	}
	if opts.showVersion {
		fmt.Fprintln(stdout, command, version)
		return 0
	}
	if err := opts.validate(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", command, err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	klog.FromContext(ctx).Info("Starting", "command", command, "version", version)
	err := run(ctx, opts)
	klog.Flush()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", command, err)
		return 1
	}
	return 0
}

type options struct {
	showVersion bool
	kubeconfig  string
	workers     int
	qps         float64
	burst       int
	resync      time.Duration

	leaderElection          bool
	leaderElectionNamespace string
	leaseDuration           time.Duration
	renewDeadline           time.Duration
	retryPeriod             time.Duration
	leaderElectionLabels    labelMap

	httpEndpoint string
	metricsPath  string

	webhook         webhookOptions
	recreate        bool
	recordNamespace string
}

func addFlags(fs *flag.FlagSet) *options {
	o := &options{leaderElectionLabels: labelMap{}}
	fs.BoolVar(&o.showVersion, "version", false, "Show version.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Absolute path to the kubeconfig file. Required only when running out of cluster.")
	fs.IntVar(&o.workers, "workers", 10, "Number of StatefulSets reconciled in parallel.")
	fs.Float64Var(&o.qps, "kube-api-qps", 5, "QPS to use while communicating with the kubernetes apiserver.")
	fs.IntVar(&o.burst, "kube-api-burst", 10, "Burst to use while communicating with the kubernetes apiserver.")
	fs.DurationVar(&o.resync, "resync-period", 10*time.Minute, "Resync period of the informers: every StatefulSet is re-evaluated this often even without changes. 0 disables it.")
	fs.BoolVar(&o.leaderElection, "leader-election", false, "Enable leader election (Lease \""+controller.Name+"\").")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease. Defaults to the pod's namespace.")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "Duration that non-leader candidates wait before forcing to acquire leadership.")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "Duration that the acting leader retries refreshing leadership before giving up.")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 5*time.Second, "Duration the leader election clients wait between tries of actions.")
	fs.Var(&o.leaderElectionLabels, "leader-election-labels", "Labels added to the Lease while this replica leads, as key:value pairs separated by commas, e.g. 'team:storage,tier:control'.")
	fs.StringVar(&o.httpEndpoint, "http-endpoint", "", "TCP address of the HTTP server for metrics and health checks (example: `:8080`). Empty disables it.")
	fs.StringVar(&o.metricsPath, "metrics-path", "/metrics", "HTTP path of the Prometheus metrics.")
	addWebhookFlags(fs, &o.webhook)
	fs.BoolVar(&o.recreate, "recreate", true, "Once the webhook recorded a volume claim template change of an opted-in StatefulSet (annotation csi-resizer.io/desired-volume-claim-templates), replace the StatefulSet by one with those templates right away (crash-safe orphan delete and create; pods and PVCs are kept). false: reconcile the PVCs with the annotation and keep the StatefulSet as it is (needs the webhook off). Re-creates already under way are finished either way.")
	fs.StringVar(&o.recordNamespace, "recreate-record-namespace", "", "Namespace of the re-create records (ConfigMaps): statefulset-resizer's own, where users cannot write. Defaults to the pod's namespace (POD_NAMESPACE, or the service account's); required out of a cluster.")
	return o
}

func (o *options) validate() error {
	switch {
	case o.workers < 1:
		return fmt.Errorf("--workers must be positive, got %d", o.workers)
	case o.qps <= 0:
		return fmt.Errorf("--kube-api-qps must be positive, got %v", o.qps)
	case o.burst < 1:
		return fmt.Errorf("--kube-api-burst must be positive, got %d", o.burst)
	case o.resync < 0:
		return fmt.Errorf("--resync-period must not be negative, got %s", o.resync)
	case !strings.HasPrefix(o.metricsPath, "/"):
		return fmt.Errorf("--metrics-path must start with /, got %q", o.metricsPath)
	}
	if err := o.webhook.validate(); err != nil {
		return err
	}
	if !o.recreate && o.webhook.port != 0 {
		// The webhook's changes are made by re-creating the StatefulSet: without
		// it, a recorded change would stay an annotation that later updates of
		// the object cannot see (docs/design.md §3.7 rule 8).
		return fmt.Errorf("--recreate=false cannot be combined with --webhook-port: the changes the webhook accepts are applied by re-creating the StatefulSet")
	}
	if o.leaderElection {
		// client-go's leader election panics on these; say it in one line.
		switch {
		case o.retryPeriod <= 0:
			return fmt.Errorf("--leader-election-retry-period must be positive, got %s", o.retryPeriod)
		case float64(o.renewDeadline) <= 1.2*float64(o.retryPeriod):
			return fmt.Errorf("--leader-election-renew-deadline (%s) must be greater than 1.2 × --leader-election-retry-period (%s)", o.renewDeadline, o.retryPeriod)
		case o.leaseDuration <= o.renewDeadline:
			return fmt.Errorf("--leader-election-lease-duration (%s) must be greater than --leader-election-renew-deadline (%s)", o.leaseDuration, o.renewDeadline)
		}
	}
	if o.recordNamespace == "" {
		o.recordNamespace = podNamespace()
	}
	if o.recordNamespace == "" {
		return fmt.Errorf("the namespace of the re-create records is unknown out of a cluster: set --recreate-record-namespace (or POD_NAMESPACE) to statefulset-resizer's own namespace")
	}
	return nil
}

// labelMap is a flag value of key:value pairs separated by commas, the format
// of the CSI sidecars' --leader-election-labels.
type labelMap map[string]string

func (m labelMap) String() string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+":"+v)
	}
	return strings.Join(parts, ",")
}

func (m labelMap) Set(value string) error {
	for _, item := range strings.Split(value, ",") {
		k, v, ok := strings.Cut(item, ":")
		if !ok || k == "" || strings.Contains(v, ":") {
			return fmt.Errorf("malformed label %q, want key:value", item)
		}
		m[k] = v
	}
	return nil
}

// leaderIdentity is this process's identity on the Lease: the host name plus a random suffix.
// csi-lib-utils' default, the host name alone, gives two replicas on one host (or a pod name
// reused by a replacement pod) the same identity, and client-go's leader election then lets
// both lead at once, each renewing "its" Lease.
func leaderIdentity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading the host name for the leader identity: %w", err)
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return "", fmt.Errorf("reading randomness for the leader identity: %w", err)
	}
	return host + "_" + hex.EncodeToString(suffix), nil
}

func run(ctx context.Context, o *options) error {
	logger := klog.FromContext(ctx)
	config, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("building the Kubernetes client config (check --kubeconfig): %w", err)
	}
	config.QPS, config.Burst = float32(o.qps), o.burst
	config = rest.AddUserAgent(config, command)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("creating the Kubernetes client: %w", err)
	}

	factory := informers.NewSharedInformerFactory(client, o.resync)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: command})

	m := ssmetrics.New()
	if err := m.Register(legacyregistry.Register); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	ctrl, err := controller.New(ctx, client, factory, recorder, clock.RealClock{}, controller.Options{Metrics: m, Recreate: o.recreate, RecordNamespace: o.recordNamespace})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	if o.httpEndpoint != "" {
		defer serveHTTP(logger, o, mux).Close()
	}

	done := make(chan error, 1)
	if o.webhook.port != 0 {
		// Every replica serves the webhook, leader or not: the apiserver calls any of them.
		if err := startWebhook(ctx, &o.webhook, client, done); err != nil {
			return err
		}
	}
	runController := func(ctx context.Context) { done <- ctrl.Run(ctx, o.workers) }
	if !o.leaderElection {
		go runController(ctx)
		return <-done
	}

	le, err := newLeaderElection(ctx, o, config, mux, runController)
	if err != nil {
		return err
	}
	return runLeaderElection(ctx, le, done)
}

// runLeaderElection runs le until ctx ends or the controller it runs while
// leading returns on done.
func runLeaderElection(ctx context.Context, le interface{ Run() error }, done chan error) error {
	go func() {
		if err := le.Run(); err != nil {
			done <- fmt.Errorf("leader election: %w", err)
		}
	}()
	// Once ctx ends, a leading controller gets a moment to stop its workers.
	ended, grace := ctx.Done(), (<-chan time.Time)(nil)
	for {
		select {
		case err := <-done:
			return err
		case <-ended:
			ended, grace = nil, time.After(5*time.Second)
		case <-grace:
			return nil
		}
	}
}

// serveHTTP serves the metrics and /healthz (and, with leader election, its
// health check, registered on mux later) on --http-endpoint; the process
// exits if the endpoint fails.
func serveHTTP(logger klog.Logger, o *options, mux *http.ServeMux) *http.Server {
	mux.Handle(o.metricsPath, legacyregistry.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Addr: o.httpEndpoint, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP endpoint failed", "address", o.httpEndpoint)
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
	}()
	logger.Info("Serving metrics", "address", o.httpEndpoint, "path", o.metricsPath)
	return srv
}

// newLeaderElection prepares the leader election that runs runController
// while this process leads, as the flags say, until ctx ends.
func newLeaderElection(ctx context.Context, o *options, config *rest.Config, mux *http.ServeMux, runController func(context.Context)) (interface{ Run() error }, error) {
	// A separate client, so that leader election is not starved when the
	// controller's client is throttled by --kube-api-qps.
	leClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("creating the leader election client: %w", err)
	}
	identity, err := leaderIdentity()
	if err != nil {
		return nil, err
	}
	le := leaderelection.NewLeaderElection(leClient, controller.Name, runController)
	le.WithIdentity(identity)
	if o.httpEndpoint != "" {
		le.PrepareHealthCheck(mux, leaderelection.DefaultHealthCheckTimeout)
	}
	if o.leaderElectionNamespace != "" {
		le.WithNamespace(o.leaderElectionNamespace)
	}
	if len(o.leaderElectionLabels) > 0 {
		le.WithLabels(o.leaderElectionLabels)
	}
	le.WithLeaseDuration(o.leaseDuration)
	le.WithRenewDeadline(o.renewDeadline)
	le.WithRetryPeriod(o.retryPeriod)
	le.WithReleaseOnCancel(true) // a clean shutdown hands over at once
	le.WithContext(ctx)
	return le, nil
}
