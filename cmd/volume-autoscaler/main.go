// Command volume-autoscaler grows PVCs before they fill, from the usage each kubelet reports
// on its own /stats/summary (authorized as nodes/stats, never nodes/proxy), with the policy of
// docs/autoscaler.md: opt-in per StorageClass or PVC, pvc-autoresizer's annotations read as
// they are documented, StatefulSet siblings, one resize at a time. Issue 33.
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
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/controller"
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/kubeletstats"
	asmetrics "github.com/csi-resizer/csi-resizer/pkg/autoscale/metrics"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const command = "volume-autoscaler"

// workerGrace is how long, after the stop, the workers get to finish the PVC they are on.
const workerGrace = 10 * time.Second

// serviceAccountToken is where the kubelet mounts the pod's ServiceAccount token.
const serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"

const usage = `Usage: volume-autoscaler [flags]

Grows PVCs before they fill (docs/autoscaler.md). Reads each kubelet's
/stats/summary on the kubelet's own port with the ServiceAccount's token
(RBAC: nodes/stats get; never nodes/proxy). A PVC is autoscaled when it or its
StorageClass is opted in (csi-resizer.io/autoscale: "true", or
pvc-autoresizer's resize.topolvm.io/enabled) and it has a limit. Flags take two
dashes (--kubeconfig); -v is the one short flag.

Flags:
`

func main() {
	os.Exit(Main(os.Args[1:]))
}

// Main is the whole command; it returns the exit code. Start-up as the other commands'
// (cli.Start): parse the flags (exit 2) → --help / --version → apply logging → validate the
// other flags (exit 2) → run.
func Main(args []string) int {
	fs := pflag.NewFlagSet(command, pflag.ContinueOnError)
	o := addFlags(fs)
	return cli.Start{Command: command, Version: version, Usage: usage, Flags: fs, Logging: o.logging,
		ShowVersion: &o.showVersion, ArgsHint: "see --help",
		Validate: o.validate, Run: func(ctx context.Context) error { return run(ctx, o) }}.Main(args)
}

func run(ctx context.Context, o *options) error {
	config, client, err := o.api.Client(command)
	if err != nil {
		return err
	}
	stats, err := kubeletstats.NewClient(o.kubelet)
	if err != nil {
		return err
	}

	factory := informers.NewSharedInformerFactory(client, 0)
	broadcaster, recorder := events.Start(ctx, client, command)
	defer broadcaster.Shutdown()

	m := asmetrics.New()
	if err := m.Register(legacyregistry.Register); err != nil {
		return fmt.Errorf("registering metrics: %w", err)
	}
	ctrl, err := controller.New(ctx, client, factory, recorder, clock.RealClock{}, controller.Options{
		Defaults: o.defaults, Poller: kubeletstats.NewPoller(stats, o.concurrency, nil),
		Interval: o.interval, DryRun: o.dryRun, Metrics: m})
	if err != nil {
		return err
	}

	return o.le.RunControllers(ctx, config, controller.Name, o.http, workerGrace,
		func(ctx context.Context) error { return ctrl.Run(ctx, o.workers) })
}
