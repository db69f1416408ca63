// Command statefulset-resizer reconciles the volume claim templates of
// StatefulSets with their PVCs (KEP-661, with KEP-1790 recovery); its
// `webhook` subcommand serves the admission webhook that records template
// changes, as a process of its own with its own ServiceAccount (it needs no
// right on StatefulSets), and its `wait` subcommand blocks a CI/CD job until a
// StatefulSet's volumes are resized. See docs/statefulset-resizer.md.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/informers"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection" // leader_election_master_status
	_ "k8s.io/component-base/metrics/prometheus/workqueue"               // workqueue_* metrics of the queue
	"k8s.io/utils/clock"

	"github.com/csi-resizer/csi-resizer/internal/cli"
	"github.com/csi-resizer/csi-resizer/internal/events"
	"github.com/csi-resizer/csi-resizer/internal/logging"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/controller"
	ssmetrics "github.com/csi-resizer/csi-resizer/pkg/statefulset/metrics"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const command = "statefulset-resizer"

// workerGrace is how long, after the stop, the controller's workers get to finish the
// StatefulSet they are on before the process exits without releasing its Lease.
const workerGrace = 10 * time.Second

const usage = `Usage: statefulset-resizer [flags]
       statefulset-resizer webhook [--webhook-port 9443] [flags] (see webhook --help)
       statefulset-resizer wait NAMESPACE/NAME [--timeout 5m] [--kubeconfig FILE] (see wait --help)

Reconciles the volume claim templates of StatefulSets with their PVCs
(docs/statefulset-resizer.md). The admission webhook is not served here: it is
the webhook subcommand, run as its own Deployment. Flags take two dashes
(--kubeconfig); -v is the one short flag.

Flags:
`

func main() {
	os.Exit(Main(os.Args[1:]))
}

// Main is the whole command; it returns the exit code. Start-up order, as csi-resizer's: parse
// the flags (a malformed one: exit 2, one plain line) → --help / --version → apply logging →
// validate the other flags → run. From the logging step on, the reason the process stops is
// logged in the chosen format (with --logging-format=json, a JSON object).
func Main(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "wait":
			return runWait(args[1:])
		case "webhook":
			return runWebhook(args[1:])
		}
	}
	fs := pflag.NewFlagSet(command, pflag.ContinueOnError)
	opts := addFlags(fs)
	return cli.Start{Command: command, Version: version, Usage: usage, Flags: fs, Logging: opts.logging,
		ShowVersion: &opts.showVersion, Elsewhere: webhookOnly,
		ArgsHint: `the subcommands are "webhook" and "wait", given first; see --help`,
		Validate: opts.validate, Run: func(ctx context.Context) error { return run(ctx, opts) }}.Main(args)
}

type options struct {
	showVersion bool
	api         cli.API
	workers     int
	resync      time.Duration

	le cli.LeaderElection

	http cli.HTTP

	recreate        bool
	recordNamespace string

	// logging is component-base's, as csi-resizer's: --logging-format, -v, --vmodule, ...
	logging *logging.Logging
}

func addFlags(fs *pflag.FlagSet) *options {
	o := &options{logging: logging.New(command)}
	fs.BoolVar(&o.showVersion, "version", false, "Show version.")
	o.api.AddFlags(fs)
	fs.IntVar(&o.workers, "workers", 10, "Number of StatefulSets reconciled in parallel.")
	fs.DurationVar(&o.resync, "resync-period", 10*time.Minute, "Resync period of the informers: every StatefulSet is re-evaluated this often even without changes. 0 disables it.")
	o.le.AddFlags(fs, "Enable leader election (Lease \""+controller.Name+"\"). On SIGTERM the leader's workers finish the StatefulSet they are on (at most "+workerGrace.String()+"), then the Lease is released for a standby to take over at once.")
	o.http.AddFlags(fs, "health checks")
	fs.BoolVar(&o.recreate, "recreate", true, "Once the webhook recorded a volume claim template change of an opted-in StatefulSet (annotation csi-resizer.io/desired-volume-claim-templates), replace the StatefulSet by one with those templates right away (crash-safe orphan delete and create; pods and PVCs are kept). false: reconcile the PVCs with the annotation and keep the StatefulSet as it is (needs the webhook uninstalled: the changes it accepts are applied by re-creating). Re-creates already under way are finished either way.")
	fs.StringVar(&o.recordNamespace, "recreate-record-namespace", "", "Namespace of the re-create records (ConfigMaps): statefulset-resizer's own, where users cannot write. Defaults to the pod's namespace (POD_NAMESPACE, or the service account's); required out of a cluster.")
	o.logging.AddFlags(fs)
	return o
}

func (o *options) validate() error {
	switch {
	case o.workers < 1:
		return fmt.Errorf("--workers must be positive, got %d", o.workers)
	case o.resync < 0:
		return fmt.Errorf("--resync-period must not be negative, got %s", o.resync)
	}
	if err := o.api.Validate(); err != nil {
		return err
	}
	if err := o.http.Validate(); err != nil {
		return err
	}
	if err := o.le.Validate(); err != nil {
		return err
	}
	if o.recordNamespace == "" {
		o.recordNamespace = podNamespace()
	}
	if o.recordNamespace == "" {
		return fmt.Errorf("the namespace of the re-create records is unknown out of a cluster: set --recreate-record-namespace (or POD_NAMESPACE) to statefulset-resizer's own namespace")
	}
	return nil
}

func run(ctx context.Context, o *options) error {
	config, client, err := o.api.Client(command)
	if err != nil {
		return err
	}

	factory := informers.NewSharedInformerFactory(client, o.resync)
	broadcaster, recorder := events.Start(ctx, client, command)
	defer broadcaster.Shutdown()

	m := ssmetrics.New()
	if err := m.Register(legacyregistry.Register); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	ctrl, err := controller.New(ctx, client, factory, recorder, clock.RealClock{}, controller.Options{Metrics: m, Recreate: o.recreate, RecordNamespace: o.recordNamespace})
	if err != nil {
		return err
	}

	return o.le.RunControllers(ctx, config, controller.Name, o.http, workerGrace,
		func(ctx context.Context) error { return ctrl.Run(ctx, o.workers) })
}
