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
NAMESPACE/NAME.

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

	// Go's flag package stops at the first argument; parse again after
	// NAMESPACE/NAME so that flags may follow it, like kubectl's.
	var target string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprint(stdout, waitUsage)
				fs.SetOutput(stdout)
				fs.PrintDefaults()
				return 0
			}
			return fail("%v (see --help)", err)
		}
		if fs.NArg() == 0 {
			break
		}
		if target != "" {
			return fail("unexpected argument %q: want exactly one NAMESPACE/NAME", fs.Arg(0))
		}
		target, rest = fs.Arg(0), fs.Args()[1:]
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

	config, err := clientConfig(*kubeconfig)
	if err != nil {
		return fail("building the Kubernetes client config (check --kubeconfig): %v", err)
	}
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(config, command+"-wait"))
	if err != nil {
		return fail("creating the Kubernetes client: %v", err)
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

// clientConfig loads the configuration like kubectl: the given file, else
// $KUBECONFIG or ~/.kube/config, else the in-cluster service account.
func clientConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kubeconfig != "" {
		rules.ExplicitPath = kubeconfig
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}
