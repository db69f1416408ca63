package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/internal/logging"
)

// Start is the start-up every long-running pflag command (and subcommand) shares, in this
// order: parse the flags (a malformed one: exit 2, one plain line) → --help / --version →
// apply logging → validate the other flags (exit 2) → run until SIGTERM or SIGINT (an error:
// exit 1). From the logging step on, the reason the process stops is logged in the chosen
// format (with --logging-format=json, a JSON object).
type Start struct {
	// Command is the binary's name, for --version and the "Starting" log line.
	Command, Version string
	// Usage is printed before the flags by --help.
	Usage   string
	Flags   *pflag.FlagSet
	Logging *logging.Logging
	// ShowVersion is the --version flag's value.
	ShowVersion *bool
	// Elsewhere tells of a flag Flags lacks that another mode of the binary has (may be nil).
	Elsewhere func(name string) string
	// ArgsHint ends the error about an unexpected argument, e.g. "see --help".
	ArgsHint string
	// LogValues are added to the "Starting" log line.
	LogValues []any
	Validate  func() error
	Run       func(ctx context.Context) error
}

// Main runs the command with args and returns its exit code.
func (s Start) Main(args []string) int {
	err := ParseFlags(s.Flags, args, s.Elsewhere)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprint(os.Stdout, s.Usage, s.Flags.FlagUsages())
		return 0
	case err != nil:
		return s.Logging.Fail(os.Stderr, 2, err)
	case s.Flags.NArg() > 0:
		return s.Logging.Fail(os.Stderr, 2, fmt.Errorf("unexpected argument %q (%s)", s.Flags.Arg(0), s.ArgsHint))
	case *s.ShowVersion:
		fmt.Fprintln(os.Stdout, s.Command, s.Version)
		return 0
	}
	if err := s.Logging.Apply(); err != nil {
		return s.Logging.Fail(os.Stderr, 2, err)
	}
	if err := s.Validate(); err != nil {
		return s.Logging.Fail(os.Stderr, 2, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	klog.FromContext(ctx).Info("Starting", append([]any{"command", s.Command, "version", s.Version}, s.LogValues...)...)
	if err := s.Run(ctx); err != nil {
		return s.Logging.Fail(os.Stderr, 1, err)
	}
	klog.Flush()
	return 0
}

// API is the flags of the connection to the apiserver.
type API struct {
	Kubeconfig string
	QPS        float64
	Burst      int
}

// AddFlags registers --kubeconfig, --kube-api-qps and --kube-api-burst.
func (a *API) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&a.Kubeconfig, "kubeconfig", "", "Absolute path to the kubeconfig file. Required only when running out of cluster.")
	fs.Float64Var(&a.QPS, "kube-api-qps", 5, "QPS to use while communicating with the kubernetes apiserver.")
	fs.IntVar(&a.Burst, "kube-api-burst", 10, "Burst to use while communicating with the kubernetes apiserver.")
}

// Validate names the flag of a value client-go would misuse.
func (a *API) Validate() error {
	switch {
	case a.QPS <= 0:
		return fmt.Errorf("--kube-api-qps must be positive, got %v", a.QPS)
	case a.Burst < 1:
		return fmt.Errorf("--kube-api-burst must be positive, got %d", a.Burst)
	}
	return nil
}

// Client builds the client config (with userAgent) and a client from the flags.
func (a *API) Client(userAgent string) (*rest.Config, kubernetes.Interface, error) {
	config, err := clientcmd.BuildConfigFromFlags("", a.Kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("building the Kubernetes client config (check --kubeconfig): %w", err)
	}
	config.QPS, config.Burst = float32(a.QPS), a.Burst
	config = rest.AddUserAgent(config, userAgent)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	return config, client, nil
}
