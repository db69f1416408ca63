package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/csi-resizer/csi-resizer/pkg/statefulset/wait"
)

const waitUsage = `Usage: statefulset-resizer wait NAMESPACE/NAME [--timeout 5m] [--kubeconfig FILE]

Waits until every volume claim template of the StatefulSet is finished for its
current generation (status annotation csi-resizer.io/volume-claim-templates-status,
written by the statefulset-resizer controller). Flags may come before or after
NAMESPACE/NAME. Sizes recorded by the admission webhook (annotation
csi-resizer.io/desired-volume-claim-templates) count: the wait lasts until the
volumes have them and, unless the controller runs with --recreate=false, until
the StatefulSet was re-created with them.

Exit codes:
  0  every template is finished for the current generation
  1  a replica's volume cannot reach the template size without a user action
     (the message names the PVC and the driver's message)
  2  timeout
  3  the wait could not be done (bad arguments, no access to the StatefulSet)

Flags:
`

// runWait is the wait subcommand; it returns the exit code.
func runWait(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(command+" wait", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	timeout := fs.Duration("timeout", 5*time.Minute, "How long to wait.")
	kubeconfig := fs.String("kubeconfig", "", "Path to the kubeconfig file. Default: $KUBECONFIG, ~/.kube/config, then in-cluster.")
	interval := fs.Duration("interval", 2*time.Second, "How often to read the StatefulSet.")
	fail := func(format string, args ...any) int {
		fmt.Fprintf(stderr, command+" wait: "+format+"\n", args...)
		return int(wait.Failed)
	}

	target, err := parseInterspersed(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, waitUsage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0
	case err != nil:
		return fail("%v", err)
	}
	if target == "" {
		return fail("missing NAMESPACE/NAME (see --help)")
	}
	namespace, name, err := wait.ParseTarget(target)
	if err != nil {
		return fail("%v", err)
	}
	if *timeout <= 0 {
		return fail("--timeout must be positive, got %s", *timeout)
	}
	if *interval <= 0 {
		return fail("--interval must be positive, got %s", *interval)
	}

	client, err := waitClient(*kubeconfig)
	if err != nil {
		return fail("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	v := wait.Wait(ctx, wait.ClientGetter{Client: client}, namespace, name, wait.Options{
		Timeout:  *timeout,
		Interval: *interval,
		Progress: func(message string) {
			fmt.Fprintf(stderr, "Waiting for StatefulSet %s/%s: %s\n", namespace, name, message)
		},
	})
	switch v.Outcome {
	case wait.Finished:
		fmt.Fprintf(stdout, "StatefulSet %s/%s: %s\n", namespace, name, v.Message)
	case wait.Infeasible:
		fmt.Fprintf(stderr, "StatefulSet %s/%s: volume resize infeasible: %s\n", namespace, name, v.Message)
	default:
		fmt.Fprintf(stderr, "StatefulSet %s/%s: %s\n", namespace, name, v.Message)
	}
	return int(v.Outcome)
}

// waitClient makes the wait subcommand's client from the configuration
// clientConfig loads.
func waitClient(kubeconfig string) (kubernetes.Interface, error) {
	config, err := clientConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client config (check --kubeconfig): %w", err)
	}
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(config, command+"-wait"))
	if err != nil {
		return nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	return client, nil
}

// clientConfig loads the configuration like kubectl: the given file, else
// $KUBECONFIG or ~/.kube/config, else the in-cluster service account.
func clientConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// parseInterspersed parses args into fs and returns the one positional
// argument ("" if none). Go's flag package stops at the first argument;
// parsing again after it lets flags follow NAMESPACE/NAME, like kubectl's.
func parseInterspersed(fs *flag.FlagSet, args []string) (string, error) {
	var target string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return "", err
			}
			return "", fmt.Errorf("%w (see --help)", err)
		}
		if fs.NArg() == 0 {
			return target, nil
		}
		if target != "" {
			return "", fmt.Errorf("unexpected argument %q: want exactly one NAMESPACE/NAME", fs.Arg(0))
		}
		target, rest = fs.Arg(0), fs.Args()[1:]
	}
}
