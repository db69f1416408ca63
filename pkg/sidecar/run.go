package sidecar

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
	"syscall"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/leaderelection"
	csimetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection" // leader_election_master_status
	_ "k8s.io/component-base/metrics/prometheus/workqueue"               // workqueue_* metrics
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-resizer/csi-resizer/pkg/controller"
	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/features"
	"github.com/csi-resizer/csi-resizer/pkg/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/status"
)

// Main is the whole csi-resizer command. It returns the process exit code.
func Main(args []string, version string) int {
	fs := flag.NewFlagSet("csi-resizer", flag.ContinueOnError)
	// standardflags defines --metrics-path on flag.CommandLine; point the global set at ours
	// so every flag lands in one place.
	flag.CommandLine = fs
	klog.InitFlags(fs)
	opts := AddFlags(fs)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fmt.Fprintf(os.Stdout, "Usage of csi-resizer (%s):\n", version)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(os.Stderr, "csi-resizer: %v (see --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "csi-resizer: unexpected arguments %q (see --help)\n", fs.Args())
		return 2
	}
	if opts.Common.ShowVersion {
		fmt.Println(os.Args[0], version)
		return 0
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "csi-resizer: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := klog.FromContext(ctx)
	logger.Info("Starting csi-resizer", "version", version)
	opts.WarnIgnored(logger)
	if err := run(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "csi-resizer: %v\n", err)
		klog.Flush()
		return 1
	}
	klog.Flush()
	return 0
}

func run(ctx context.Context, opts *Options) error {
	logger := klog.FromContext(ctx)
	mm := csimetrics.NewCSIMetricsManagerForSidecar("")
	conn, err := csi.Connect(ctx, opts.Common.CSIAddress, opts.Timeout, mm)
	if err != nil {
		return err
	}
	defer conn.Close()
	driver, err := csi.Handshake(ctx, conn, opts.Timeout)
	if err != nil {
		return err
	}
	mm.SetDriverName(driver.Name)
	logger.Info("CSI driver ready", "driver", driver.Name, "controllerExpansion", driver.ControllerExpand,
		"nodeExpansion", driver.NodeExpand, "offlineOnly", driver.OfflineOnly)

	config, err := clientcmd.BuildConfigFromFlags(opts.Master, opts.Common.KubeConfig)
	if err != nil {
		return fmt.Errorf("building the Kubernetes client config (check --kubeconfig/--master): %w", err)
	}
	config.QPS = float32(opts.Common.KubeAPIQPS)
	config.Burst = opts.Common.KubeAPIBurst
	config = rest.AddUserAgent(config, "csi-resizer")
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("creating the Kubernetes client: %w", err)
	}

	factory := informers.NewSharedInformerFactoryWithOptions(client, opts.ResyncPeriod, informers.WithTransform(slimObject))
	pvcs := factory.Core().V1().PersistentVolumeClaims()
	pvs := factory.Core().V1().PersistentVolumes()

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "external-resizer " + driver.Name})

	rec := metrics.NewRecorder(driver.Name)
	ctrl := controller.New(controller.Config{
		Driver:             driver,
		Expander:           csi.NewClient(conn, opts.Timeout),
		Client:             client,
		Writer:             &status.APIWriter{Client: client, FieldManager: "csi-resizer"},
		Recorder:           recorder,
		Metrics:            rec,
		Clock:              clock.RealClock{},
		RetryIntervalStart: opts.RetryIntervalStart,
		RetryIntervalMax:   opts.RetryIntervalMax,
		HandleVolumeInUse:  opts.HandleVolumeInUseError,
		Legacy:             !opts.FeatureGates.Enabled(features.RecoverVolumeExpansionFailure),
		AnnotateFsResize:   opts.FeatureGates.Enabled(features.AnnotateFsResize),
	}, pvcs, pvs)

	mux := http.NewServeMux()
	if addr := opts.HTTPAddress(); addr != "" {
		rec.Register(mm.GetRegistry())
		mm.GetRegistry().CustomMustRegister(metrics.NewStateCollector(driver.Name, ctrl.ClaimStates))
		mm.WithAdditionalRegistry(legacyregistry.DefaultGatherer)
		mm.RegisterToServer(mux, opts.Common.MetricsPath)
		srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error(err, "HTTP endpoint failed", "address", addr)
				klog.FlushAndExit(klog.ExitFlushTimeout, 1)
			}
		}()
		defer srv.Close()
		logger.Info("Serving metrics", "address", addr, "path", opts.Common.MetricsPath)
	}

	runErr := make(chan error, 1)
	runController := func(ctx context.Context) {
		factory.Start(ctx.Done())
		runErr <- ctrl.Run(ctx, opts.Workers)
	}
	if opts.Common.LeaderElection {
		le, err := newLeaderElection(ctx, config, opts, driver.Name, runController)
		if err != nil {
			return err
		}
		if opts.HTTPAddress() != "" {
			le.PrepareHealthCheck(mux, leaderelection.DefaultHealthCheckTimeout)
		}
		go func() {
			if err := le.Run(); err != nil {
				runErr <- fmt.Errorf("leader election: %w", err)
			}
		}()
	} else {
		go runController(ctx)
	}
	select {
	case err := <-runErr:
		return err
	case <-ctx.Done():
		select {
		case err := <-runErr:
			return err
		case <-time.After(5 * time.Second):
			return nil
		}
	}
}

// slimObject drops what the resizer never reads from cached PVCs and PVs: managedFields and the
// last-applied annotation are typically most of an object's size.
func slimObject(obj any) (any, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d, nil
	}
	switch o := obj.(type) {
	case *v1.PersistentVolumeClaim:
		o.ManagedFields = nil
		delete(o.Annotations, lastApplied)
	case *v1.PersistentVolume:
		o.ManagedFields = nil
		delete(o.Annotations, lastApplied)
	}
	return obj, nil
}

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// newLeaderElection builds csi-lib-utils' Lease-based leader election. The Lease name is
// upstream's (external-resizer-<driver>), so an upgrade from external-resizer keeps one
// leader. The identity is the host name plus a random suffix: csi-lib-utils' default, the host
// name alone, lets two resizers on one host (or one with a reused pod name) both believe they
// lead.
func newLeaderElection(ctx context.Context, config *rest.Config, opts *Options, driverName string, run func(context.Context)) (interface {
	PrepareHealthCheck(leaderelection.Server, time.Duration)
	Run() error
}, error) {
	// A client of its own, so a throttled controller cannot starve lease renewals.
	leClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("creating the leader election client: %w", err)
	}
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("reading the host name for the leader identity: %w", err)
	}
	le := leaderelection.NewLeaderElection(leClient, "external-resizer-"+driverName, run)
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return nil, fmt.Errorf("reading randomness for the leader identity: %w", err)
	}
	le.WithIdentity(host + "_" + hex.EncodeToString(suffix))
	if opts.Common.LeaderElectionNamespace != "" {
		le.WithNamespace(opts.Common.LeaderElectionNamespace)
	}
	if len(opts.Common.LeaderElectionLabels) > 0 {
		le.WithLabels(opts.Common.LeaderElectionLabels)
	}
	le.WithLeaseDuration(opts.Common.LeaderElectionLeaseDuration)
	le.WithRenewDeadline(opts.Common.LeaderElectionRenewDeadline)
	le.WithRetryPeriod(opts.Common.LeaderElectionRetryPeriod)
	le.WithReleaseOnCancel(true)
	le.WithContext(ctx)
	return le, nil
}
