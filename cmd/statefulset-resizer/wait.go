package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/internal/cli"
	"github.com/csi-resizer/csi-resizer/internal/logging"
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

Progress and failures go to stderr: plain lines, or with --logging-format=json
one JSON object per line. The final success line goes to stdout.

Exit codes:
  0  every template is finished for the current generation
  1  a replica's volume cannot reach the template size without a user action
     (the message names the PVC and the driver's message)
  2  timeout
  3  the wait could not be done (bad arguments, no access to the StatefulSet)

Flags:
`

// waitOptions are the wait subcommand's flags.
type waitOptions struct {
	timeout, interval time.Duration
	kubeconfig        string
	logging           *logging.Logging
}

func addWaitFlags(fs *pflag.FlagSet) *waitOptions {
	o := &waitOptions{logging: logging.New(command + " wait")}
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "How long to wait.")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to the kubeconfig file. Default: $KUBECONFIG, ~/.kube/config, then in-cluster.")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "How often to read the StatefulSet.")
	o.logging.AddFlags(fs)
	return o
}

// runWait is the wait subcommand; it returns the exit code. Start-up as the controller's:
// parse, --help, apply logging, validate; from the logging step on, with
// --logging-format=json, every line on stderr is a JSON object.
func runWait(args []string) int {
	fs := pflag.NewFlagSet(command+" wait", pflag.ContinueOnError)
	o := addWaitFlags(fs)
	failed := int(wait.Failed)
	switch err := cli.ParseFlags(fs, args, nil); {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprint(os.Stdout, waitUsage, fs.FlagUsages())
		return 0
	case err != nil:
		return o.logging.Fail(os.Stderr, failed, err)
	}
	if err := o.logging.Apply(); err != nil {
		return o.logging.Fail(os.Stderr, failed, err)
	}
	namespace, name, err := o.target(fs.Args())
	if err != nil {
		return o.logging.Fail(os.Stderr, failed, err)
	}
	client, err := waitClient(o.kubeconfig)
	if err != nil {
		return o.logging.Fail(os.Stderr, failed, err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ref := klog.KRef(namespace, name)
	v := wait.Wait(ctx, wait.ClientGetter{Client: client}, namespace, name, wait.Options{
		Timeout:  o.timeout,
		Interval: o.interval,
		Progress: func(message string) {
			o.report(false, fmt.Sprintf("Waiting for StatefulSet %s: %s", ref, message), "Waiting for StatefulSet", ref, message)
		},
	})
	switch v.Outcome {
	case wait.Finished:
		fmt.Fprintf(os.Stdout, "StatefulSet %s: %s\n", ref, v.Message)
	case wait.Infeasible:
		o.report(true, fmt.Sprintf("StatefulSet %s: volume resize infeasible: %s", ref, v.Message), "Volume resize infeasible", ref, v.Message)
	default:
		o.report(true, fmt.Sprintf("StatefulSet %s: %s", ref, v.Message), "Wait ended without the volumes resized", ref, v.Message)
	}
	klog.Flush()
	return int(v.Outcome)
}

// target checks the positional arguments and the other flags' values.
func (o *waitOptions) target(args []string) (namespace, name string, err error) {
	switch {
	case len(args) == 0:
		return "", "", errors.New("missing NAMESPACE/NAME (see --help)")
	case len(args) > 1:
		return "", "", fmt.Errorf("unexpected argument %q: want exactly one NAMESPACE/NAME", args[1])
	case o.timeout <= 0:
		return "", "", fmt.Errorf("--timeout must be positive, got %s", o.timeout)
	case o.interval <= 0:
		return "", "", fmt.Errorf("--interval must be positive, got %s", o.interval)
	}
	return wait.ParseTarget(args[0])
}

// report writes one line on stderr: plain, or with --logging-format=json the log entry msg
// (an error when failure) with the StatefulSet ref and message.
func (o *waitOptions) report(failure bool, plain, msg string, ref klog.ObjectRef, message string) {
	switch {
	case !o.logging.Structured():
		fmt.Fprintln(os.Stderr, plain)
	case failure:
		klog.ErrorS(nil, msg, "statefulSet", ref, "message", message)
	default:
		klog.InfoS(msg, "statefulSet", ref, "message", message)
	}
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
