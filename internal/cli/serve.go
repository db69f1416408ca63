package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/internal/lifecycle"
)

// LabelMap is a flag value of key:value pairs separated by commas, the format
// of the CSI sidecars' --leader-election-labels.
type LabelMap map[string]string

func (m LabelMap) String() string {
	var parts []string
	for k, v := range m {
		parts = append(parts, k+":"+v)
	}
	return strings.Join(parts, ",")
}

// Set adds the pairs of one flag value.
func (m LabelMap) Set(value string) error {
	for _, item := range strings.Split(value, ",") {
		k, v, ok := strings.Cut(item, ":")
		if !ok || k == "" || strings.Contains(v, ":") {
			return fmt.Errorf("malformed label %q, want key:value", item)
		}
		m[k] = v
	}
	return nil
}

// Type names the value in --help.
func (LabelMap) Type() string { return "key:value,..." }

// LeaderElection is the leader election flags' values.
type LeaderElection struct {
	Enabled       bool
	Namespace     string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	Labels        LabelMap
}

// AddFlags registers the --leader-election* flags; enableHelp is --leader-election's help.
func (le *LeaderElection) AddFlags(fs *pflag.FlagSet, enableHelp string) {
	le.Labels = LabelMap{}
	fs.BoolVar(&le.Enabled, "leader-election", false, enableHelp)
	fs.StringVar(&le.Namespace, "leader-election-namespace", "", "Namespace of the leader election Lease. Defaults to the pod's namespace.")
	fs.DurationVar(&le.LeaseDuration, "leader-election-lease-duration", 15*time.Second, "Duration that non-leader candidates wait before forcing to acquire leadership.")
	fs.DurationVar(&le.RenewDeadline, "leader-election-renew-deadline", 10*time.Second, "Duration that the acting leader retries refreshing leadership before giving up.")
	fs.DurationVar(&le.RetryPeriod, "leader-election-retry-period", 5*time.Second, "Duration the leader election clients wait between tries of actions.")
	fs.Var(&le.Labels, "leader-election-labels", "Labels added to the Lease while this replica leads, as key:value pairs separated by commas, e.g. 'team:storage,tier:control'.")
}

// Validate refuses, in one line naming the flags, what client-go's leader election refuses.
func (le *LeaderElection) Validate() error {
	switch {
	case !le.Enabled:
		return nil
	case le.RetryPeriod <= 0:
		return fmt.Errorf("--leader-election-retry-period must be positive, got %s", le.RetryPeriod)
	case float64(le.RenewDeadline) <= 1.2*float64(le.RetryPeriod):
		return fmt.Errorf("--leader-election-renew-deadline (%s) must be greater than 1.2 × --leader-election-retry-period (%s)", le.RenewDeadline, le.RetryPeriod)
	case le.LeaseDuration <= le.RenewDeadline:
		return fmt.Errorf("--leader-election-lease-duration (%s) must be greater than --leader-election-renew-deadline (%s)", le.LeaseDuration, le.RenewDeadline)
	}
	return nil
}

// Elector prepares the leader election on the Lease lease, as the flags say, with its health
// check on health when not nil (the HTTP endpoint is on). The Lease is always released on a
// clean stop: unlike csi-resizer, these commands have no upstream whose default they must keep.
func (le *LeaderElection) Elector(ctx context.Context, config *rest.Config, lease string, health *http.ServeMux) (*lifecycle.Elector, error) {
	// A separate client, so that leader election is not starved when the
	// controller's client is throttled by --kube-api-qps.
	leClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("creating the leader election client: %w", err)
	}
	identity, err := lifecycle.Identity()
	if err != nil {
		return nil, err
	}
	e := lifecycle.Election{
		Client: leClient, Lease: lease, Namespace: le.Namespace, Identity: identity,
		Labels: le.Labels, LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline,
		RetryPeriod: le.RetryPeriod, Release: true,
	}
	if health != nil {
		e.Health = health
	}
	return lifecycle.NewElector(ctx, e)
}

// HTTP is the flags of the HTTP endpoint for metrics and health checks.
type HTTP struct {
	Endpoint    string
	MetricsPath string
}

// AddFlags registers --http-endpoint and --metrics-path; serves says what else the endpoint
// serves besides the metrics, for --help.
func (h *HTTP) AddFlags(fs *pflag.FlagSet, serves string) {
	fs.StringVar(&h.Endpoint, "http-endpoint", "", "TCP address of the HTTP server for metrics and "+serves+" (example: `:8080`). Empty disables it.")
	fs.StringVar(&h.MetricsPath, "metrics-path", "/metrics", "HTTP path of the Prometheus metrics.")
}

// Validate checks --metrics-path.
func (h *HTTP) Validate() error {
	if !strings.HasPrefix(h.MetricsPath, "/") {
		return fmt.Errorf("--metrics-path must start with /, got %q", h.MetricsPath)
	}
	return nil
}

// ServeHTTP serves the metrics and /healthz (and, with leader election, its
// health check, registered on mux later) on endpoint; the process
// exits if the endpoint fails.
func ServeHTTP(logger klog.Logger, endpoint, metricsPath string, mux *http.ServeMux) *http.Server {
	mux.Handle(metricsPath, legacyregistry.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	srv := &http.Server{Addr: endpoint, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP endpoint failed", "address", endpoint)
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
	}()
	logger.Info("Serving metrics", "address", endpoint, "path", metricsPath)
	return srv
}

// RunControllers runs a controller process's long-running part: the HTTP endpoint for metrics
// and health checks when --http-endpoint is set, the leader election on Lease lease when the flags
// enable it (its health check on that endpoint), and run through lifecycle.Run, which stops it
// with grace and releases the Lease in the order a clean handover needs.
func (le *LeaderElection) RunControllers(ctx context.Context, config *rest.Config, lease string, endpoint HTTP,
	grace time.Duration, run func(context.Context) error) error {
	mux := http.NewServeMux()
	var health *http.ServeMux
	if endpoint.Endpoint != "" {
		defer ServeHTTP(klog.FromContext(ctx), endpoint.Endpoint, endpoint.MetricsPath, mux).Close()
		health = mux
	}
	var elector *lifecycle.Elector
	if le.Enabled {
		var err error
		if elector, err = le.Elector(ctx, config, lease, health); err != nil {
			return err
		}
	}
	// With an elector, the controllers run only while this process leads; on the stop the
	// workers finish and the Lease is released, so a standby takes over at once.
	return lifecycle.Run(ctx, grace, elector, run)
}
