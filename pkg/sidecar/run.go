package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unique"

	csimetrics "github.com/kubernetes-csi/csi-lib-utils/metrics"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo/leaderelection" // leader_election_master_status
	_ "k8s.io/component-base/metrics/prometheus/workqueue"               // workqueue_* metrics
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-resizer/csi-resizer/internal/events"
	"github.com/csi-resizer/csi-resizer/internal/lifecycle"
	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/expandcontroller"
	"github.com/csi-resizer/csi-resizer/pkg/features"
	"github.com/csi-resizer/csi-resizer/pkg/internal/freshness"
	"github.com/csi-resizer/csi-resizer/pkg/internal/leaseguard"
	"github.com/csi-resizer/csi-resizer/pkg/internal/prioritylimit"
	"github.com/csi-resizer/csi-resizer/pkg/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/migration"
	"github.com/csi-resizer/csi-resizer/pkg/modifycontroller"
	"github.com/csi-resizer/csi-resizer/pkg/nodelocal"
	"github.com/csi-resizer/csi-resizer/pkg/status"
)

// Main is the whole csi-resizer command. It returns the process exit code.
func Main(args []string, version string) int {
	fs := flag.NewFlagSet("csi-resizer", flag.ContinueOnError)
	// standardflags' --automaxprocs sets itself through flag.CommandLine: point the global set
	// at ours so every flag lands in one place.
	flag.CommandLine = fs
	opts := AddFlags(fs)
	if code, exit := parseFlags(fs, args, version); exit {
		return code
	}
	opts.ResolveTimeouts(fs)
	opts.ResolveNodeName(os.Getenv)
	if opts.Common.ShowVersion {
		fmt.Println(os.Args[0], version)
		return 0
	}
	// Logging first, as in the other sidecars: whatever is logged from here on, the feature
	// gates' warnings included, comes out in the chosen format.
	if err := opts.Logging.Apply(); err != nil {
		return opts.Logging.Fail(os.Stderr, 2, err)
	}
	if err := opts.ApplyFeatureGates(); err != nil {
		return opts.Logging.Fail(os.Stderr, 2, err)
	}
	if err := opts.Validate(); err != nil {
		return opts.Logging.Fail(os.Stderr, 2, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Nothing is logged at the default verbosity before the driver answers (csi.Connect moves
	// csi-lib-utils' connection progress to -v=2), so a start-up failure is the one line below.
	if err := run(ctx, opts, version); err != nil {
		return opts.Logging.Fail(os.Stderr, 1, err)
	}
	klog.Flush()
	return 0
}

// parseFlags parses the command line. exit says the command is done (--help, or a parse
// error reported as one line on stderr), with code its exit status.
func parseFlags(fs *flag.FlagSet, args []string, version string) (code int, exit bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(os.Stdout)
		fmt.Fprintf(os.Stdout, "Usage of csi-resizer (%s):\n", version)
		fs.PrintDefaults()
		return 0, true
	case err != nil:
		fmt.Fprintf(os.Stderr, "csi-resizer: %v (see --help)\n", err)
		return 2, true
	case fs.NArg() > 0:
		fmt.Fprintf(os.Stderr, "csi-resizer: unexpected arguments %q (see --help)\n", fs.Args())
		return 2, true
	}
	return 0, false
}

func run(ctx context.Context, opts *Options, version string) error {
	logger := klog.FromContext(ctx)
	conn, driver, mm, err := connectDriver(ctx, opts)
	if err != nil {
		return err
	}
	defer conn.Close()
	logger.Info("CSI driver ready", "version", version, "driver", driver.Name, "controllerExpansion", driver.ControllerExpand,
		"nodeExpansion", driver.NodeExpand, "offlineOnly", driver.OfflineOnly, "controllerModify", driver.ControllerModify)

	config, err := clientConfig(opts)
	if err != nil {
		return err
	}
	client, events, err := newClients(config)
	if err != nil {
		return err
	}
	modifyOn := checkVolumeAttributesClass(logger, client.Discovery(), opts.FeatureGates, driver)
	expandOn := driver.ControllerExpand || driver.NodeExpand
	if !expandOn && !modifyOn {
		return fmt.Errorf("CSI driver %s can only modify volumes (MODIFY_VOLUME, no expansion capability), and VolumeAttributesClass modification is off: enable the VolumeAttributesClass feature gate on the apiserver and here", driver.Name)
	}

	inf, err := newInformers(ctx, client, opts)
	if err != nil {
		return err
	}
	recorder, stopEvents := newRecorder(ctx, events, driver.Name)
	defer stopEvents()
	rec := metrics.NewRecorder(driver.Name)
	leConfig, leading := leaseGuard(config, opts)
	runners := newControllers(opts, driver, conn, client, recorder, rec, inf.factory, inf.scope, leading, expandOn, modifyOn)

	mux := http.NewServeMux()
	if addr := opts.HTTPAddress(); addr != "" {
		registerMetrics(mm, rec, driver.Name, inf.factory, inf.scope, mux, opts.Common.MetricsPath)
		defer serveHTTP(logger, addr, mux).Close()
		logger.Info("Serving metrics", "address", addr, "path", opts.Common.MetricsPath)
	}

	elector, err := newElector(ctx, leConfig, opts, driver.Name, mux)
	if err != nil {
		return err
	}
	opts.LogStartupNotes(logger)
	return lifecycle.Run(ctx, opts.CallTimeout()+stopGracePeriod, elector, func(ctx context.Context) error {
		inf.start(ctx.Done())
		return runAll(ctx, opts.Workers, runners)
	})
}

// registerMetrics registers the recovery metrics, the per-state collector over the PVC and PV
// caches (with --node-deployment, of this node's volumes only: the instances' series add up)
// and the process's own metrics on the metrics manager, served at path on mux.
func registerMetrics(mm csimetrics.CSIMetricsManager, rec *metrics.Recorder, driver string,
	factory informers.SharedInformerFactory, scope *nodelocal.Scope, mux *http.ServeMux, path string) {
	pvcs, pvs := factory.Core().V1().PersistentVolumeClaims(), factory.Core().V1().PersistentVolumes()
	rec.Register(mm.GetRegistry())
	mm.GetRegistry().CustomMustRegister(metrics.NewStateCollector(driver,
		metrics.ClaimLister(driver, pvcs.Lister(), pvs.Lister(), scope.Includes, pvcs.Informer().HasSynced, pvs.Informer().HasSynced)))
	mm.WithAdditionalRegistry(legacyregistry.DefaultGatherer)
	mm.RegisterToServer(mux, path)
}

// leaseGuard is, with --leader-election, the leader election's client configuration wrapped so
// that its own Lease renewals feed the guard which every driver call asks first (docs/design.md
// §2.1), and the guard's check; without, config and a check that always passes.
func leaseGuard(config *rest.Config, opts *Options) (*rest.Config, func() error) {
	if !opts.Common.LeaderElection {
		return config, func() error { return nil }
	}
	guard := leaseguard.New(opts.Common.LeaderElectionLeaseDuration, clock.RealClock{})
	leConfig := rest.CopyConfig(config)
	leConfig.Wrap(guard.Wrap)
	return leConfig, guard.Check
}

// informerSet is the sidecar's informers: the PVC and PV caches (and, when modification is on,
// the VolumeAttributesClasses) of factory, and with --node-deployment the node scope with the
// factory of its one Node.
type informerSet struct {
	factory     informers.SharedInformerFactory
	scope       *nodelocal.Scope
	nodeFactory informers.SharedInformerFactory
}

func newInformers(ctx context.Context, client kubernetes.Interface, opts *Options) (informerSet, error) {
	scope, nodeFactory, err := nodeScope(ctx, client, opts)
	if err != nil {
		return informerSet{}, err
	}
	transform := slimObject
	if scope != nil {
		transform = slimNodeObject
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, opts.ResyncPeriod, informers.WithTransform(transform))
	return informerSet{factory: factory, scope: scope, nodeFactory: nodeFactory}, nil
}

// start starts every informer the controllers asked for.
func (s informerSet) start(stop <-chan struct{}) {
	s.factory.Start(stop)
	if s.nodeFactory != nil {
		s.nodeFactory.Start(stop)
	}
}

// nodeScope is, with --node-deployment, this instance's node scope (docs/design.md §2.12) and
// the factory of the informer that watches its one Node (a field selector on its name, so the
// apiserver sends no other Node's updates); nil without. The Node is read once first, so that a
// wrong name or a missing permission stops the process with one line instead of leaving every
// volume alone without a word.
func nodeScope(ctx context.Context, client kubernetes.Interface, opts *Options) (*nodelocal.Scope, informers.SharedInformerFactory, error) {
	if !opts.NodeDeployment {
		return nil, nil, nil
	}
	if _, err := client.CoreV1().Nodes().Get(ctx, opts.NodeName, metav1.GetOptions{}); err != nil {
		return nil, nil, fmt.Errorf("--node-deployment: reading Node %s (--node-name, or NODE_NAME): %w", opts.NodeName, err)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, opts.ResyncPeriod,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", opts.NodeName).String()
		}))
	klog.FromContext(ctx).Info("Node deployment: handling the volumes local to this node", "node", opts.NodeName)
	return nodelocal.NewScope(opts.NodeName, factory.Core().V1().Nodes()), factory, nil
}

// stopGracePeriod is how long, beyond one CSI call (the longer of --resize-timeout and
// --modify-timeout), a stopping process waits for
// the controllers' workers to finish the PVC they are on; then the Lease is released (with
// ReleaseLeaderElectionOnExit) and the process exits 0 (internal/lifecycle).
const stopGracePeriod = 5 * time.Second

// runner is a controller's Run.
type runner func(ctx context.Context, workers int) error

// newControllers builds the expansion controller when the driver can expand and the
// modification controller when modification is on (docs/design.md §2.11), on the same
// informers and with one freshness tracker, so neither decides on a PVC version the other's
// write replaced.
func newControllers(opts *Options, driver csi.Driver, conn *grpc.ClientConn, client kubernetes.Interface, recorder record.EventRecorder,
	rec *metrics.Recorder, factory informers.SharedInformerFactory, scope *nodelocal.Scope, leading func() error, expandOn, modifyOn bool) []runner {
	pvcs := factory.Core().V1().PersistentVolumeClaims()
	pvs := factory.Core().V1().PersistentVolumes()
	driverClient := csi.NewClient(conn, opts.ResizeTimeout, opts.ModifyTimeout)
	writer := &status.APIWriter{Client: client, FieldManager: "csi-resizer"}
	fresh := freshness.New()
	var runners []runner
	if expandOn {
		runners = append(runners, expandcontroller.New(expandcontroller.Config{
			Driver: driver, Expander: driverClient, Client: client, Writer: writer, Recorder: recorder, Metrics: rec,
			Clock: clock.RealClock{}, Fresh: fresh, Leading: leading, Scope: scope,
			RetryIntervalStart: opts.RetryIntervalStart,
			RetryIntervalMax:   opts.RetryIntervalMax,
			HandleVolumeInUse:  opts.HandleVolumeInUseError,
			Legacy:             !opts.FeatureGates.Enabled(features.RecoverVolumeExpansionFailure),
			AnnotateFsResize:   opts.FeatureGates.Enabled(features.AnnotateFsResize),
		}, pvcs, pvs).Run)
	}
	if modifyOn {
		runners = append(runners, modifycontroller.New(modifycontroller.Config{
			Driver: driver, Modifier: driverClient, Client: client, Writer: writer, Recorder: recorder, Metrics: rec,
			Clock: clock.RealClock{}, Fresh: fresh, Leading: leading, Scope: scope,
			RetryIntervalStart:  opts.RetryIntervalStart,
			RetryIntervalMax:    opts.RetryIntervalMax,
			ExtraModifyMetadata: opts.ExtraModifyMetadata,
			CallTimeout:         opts.ModifyTimeout,
		}, pvcs, pvs, factory.Storage().V1().VolumeAttributesClasses()).Run)
	}
	return runners
}

// runAll runs the controllers until ctx ends or one fails, which stops the others: the
// process's life is the controllers' together.
func runAll(ctx context.Context, workers int, runners []runner) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(runners))
	for _, run := range runners {
		go func() { errs <- run(ctx, workers) }()
	}
	var first error
	for range runners {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

// newRecorder is the PVC event recorder, writing through the events' own client (lower
// priority within --kube-api-qps). The source component is upstream's, so event filters written
// for upstream keep working.
func newRecorder(ctx context.Context, client typedcorev1.EventsGetter, driver string) (record.EventRecorder, func()) {
	broadcaster := events.NewBroadcaster(ctx)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.Events("")})
	return broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "external-resizer " + driver}), broadcaster.Shutdown
}

// clientConfig is the API client configuration from --kubeconfig/--master (in-cluster when
// both are empty) with --kube-api-qps/--kube-api-burst and the user agent.
func clientConfig(opts *Options) (*rest.Config, error) {
	config, err := clientcmd.BuildConfigFromFlags(opts.Master, opts.Common.KubeConfig)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client config (check --kubeconfig/--master): %w", err)
	}
	config.QPS = float32(opts.Common.KubeAPIQPS)
	config.Burst = opts.Common.KubeAPIBurst
	return rest.AddUserAgent(config, "csi-resizer"), nil
}

// serveHTTP serves the diagnostics endpoint (metrics, /healthz/leader-election) on addr. A
// listener that fails ends the process: a sidecar that cannot be scraped or health-checked
// must not run on unseen.
func serveHTTP(logger klog.Logger, addr string, mux *http.ServeMux) *http.Server {
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "HTTP endpoint failed", "address", addr)
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
	}()
	return srv
}

// connectDriver connects to the CSI driver and reads its identity and capabilities. The CSI
// replacement of an in-tree plugin labels its call metrics "migrated", as upstream does; the
// label is fixed when the metrics manager is made, and the connection's interceptor reports
// to the manager it was dialled with, so such a driver is dialled again with that manager.
func connectDriver(ctx context.Context, opts *Options) (*grpc.ClientConn, csi.Driver, csimetrics.CSIMetricsManager, error) {
	mm := csi.NewMetricsManager("", false)
	conn, err := csi.Connect(ctx, opts.Common.CSIAddress, opts.Timeout, mm)
	if err != nil {
		return nil, csi.Driver{}, nil, err
	}
	driver, err := csi.Handshake(ctx, conn, opts.Timeout)
	if err == nil && migration.IsMigratedDriver(driver.Name) {
		conn.Close()
		mm = csi.NewMetricsManager(driver.Name, true)
		conn, err = csi.Connect(ctx, opts.Common.CSIAddress, opts.Timeout, mm)
		if err != nil {
			return nil, csi.Driver{}, nil, err
		}
	}
	if err != nil {
		conn.Close()
		return nil, csi.Driver{}, nil, err
	}
	mm.SetDriverName(driver.Name)
	return conn, driver, mm, nil
}

// newClients returns the clientset of every request but events, and the events' client. Both
// take tokens from one bucket of --kube-api-qps/--kube-api-burst, the events only when no other
// request waits (package prioritylimit), so events never delay a resize and the sidecar's total
// rate stays the one the user set. The leader election builds its own client from config.
func newClients(config *rest.Config) (kubernetes.Interface, typedcorev1.CoreV1Interface, error) {
	hc, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the Kubernetes HTTP client: %w", err)
	}
	limiter := prioritylimit.New(config.QPS, config.Burst)
	mainConfig, eventsConfig := rest.CopyConfig(config), rest.CopyConfig(config)
	mainConfig.RateLimiter, eventsConfig.RateLimiter = limiter.View(prioritylimit.High), limiter.View(prioritylimit.Low)
	client, err := kubernetes.NewForConfigAndClient(mainConfig, hc)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	eventClient, err := typedcorev1.NewForConfigAndClient(eventsConfig, hc)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the Kubernetes events client: %w", err)
	}
	return client, eventClient, nil
}

// slimObject is the informers' transform: of each PVC and PV it keeps only what the resizer
// reads, drops the rest (managedFields, labels, other annotations, finalizers, owner references,
// a PV's volumeAttributes, nodeAffinity and secret references other than the controller-expand
// one, ...), and shares what many objects hold equal (sizes, access modes, namespaces, driver
// names) instead of keeping a copy per object. With 10k PVC/PV pairs the caches are most of the
// sidecar's memory.
//
// What is read, and so kept (pkg/expandcontroller, pkg/modifycontroller, pkg/expand, pkg/modify,
// pkg/csi, pkg/status, the event recorder's object reference, the log's object keys):
//   - PVC: name, namespace, UID, resourceVersion, deletionTimestamp, spec.resources,
//     spec.volumeName, spec.volumeAttributesClassName (the class a modification targets), the
//     whole status (the KEP-1790 state, the KEP-3751 currentVolumeAttributesClassName and
//     modifyVolumeStatus, the conditions the next status is computed from, phase, capacity),
//     and two annotations: storage-resizer (which driver expands a migrated in-tree volume)
//     and node-expansion-not-required (compared before it is written).
//   - PV: name, UID, resourceVersion, deletionTimestamp, the pre-resize-capacity annotation
//     (compared before it is written), the controller-expanded annotation (the driver's
//     answer the PV records, expand.ReadControllerExpanded), the two controller-modify-secret annotations (the
//     ControllerModifyVolume secret), spec.capacity, accessModes, claimRef, volumeMode,
//     mountOptions (the volume capability of ControllerExpandVolume),
//     volumeAttributesClassName (compared before it is written), and of spec.csi the
//     driver, volumeHandle, fsType and controllerExpandSecretRef; status.phase. A PV of a
//     migratable in-tree plugin (awsElasticBlockStore, gcePersistentDisk, ...) keeps its whole
//     in-tree source, its labels and its nodeAffinity: csi-translation-lib builds the volume
//     handle and topology from them (a GCE PD's zone is a label). Such PVs are few.
//
// Dropping a field here never removes it from the API object: the resizer only sends merge
// patches of the fields it changes. A new field the resizer reads must be added here.
//
// Shared values (the same ResourceList map, access-mode slice or volume-mode pointer in many
// objects) rely on client-go's rule that cached objects are read-only: the resizer deep-copies
// a status before changing it (pkg/expand) and never writes into a cached object.
func slimObject(obj any) (any, error) { return slim(obj, false) }

// slimNodeObject is the transform with --node-deployment: slimObject, and every PV keeps its
// nodeAffinity, which nodelocal.Decide reads (a few hundred bytes per PV).
func slimNodeObject(obj any) (any, error) { return slim(obj, true) }

func slim(obj any, keepAffinity bool) (any, error) {
	switch o := obj.(type) {
	case *v1.PersistentVolumeClaim:
		return slimClaim(o), nil
	case *v1.PersistentVolume:
		return slimVolume(o, keepAffinity), nil
	}
	// Anything else, including cache.DeletedFinalStateUnknown (whose object was transformed
	// when it entered the cache), as it is.
	return obj, nil
}

func slimMeta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              m.Name,
		Namespace:         internString(m.Namespace),
		UID:               m.UID,
		ResourceVersion:   m.ResourceVersion,
		Generation:        m.Generation,
		CreationTimestamp: m.CreationTimestamp,
		DeletionTimestamp: m.DeletionTimestamp,
	}
}

// claimAnnotations are the PVC annotations the resizer reads.
var claimAnnotations = []string{migration.AnnStorageResizer, expand.AnnNodeExpansionNotRequired}

// keepAnnotations returns the annotations among keys that m has (values interned: a driver
// name, "true"), nil when it has none.
func keepAnnotations(m map[string]string, keys ...string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = internString(v)
		}
	}
	return out
}

func slimClaim(pvc *v1.PersistentVolumeClaim) *v1.PersistentVolumeClaim {
	st := pvc.Status
	st.Phase = v1.PersistentVolumeClaimPhase(internString(string(st.Phase)))
	st.AccessModes = internModes(st.AccessModes)
	st.Capacity = resourceLists.intern(st.Capacity)
	st.AllocatedResources = resourceLists.intern(st.AllocatedResources)
	meta := slimMeta(&pvc.ObjectMeta)
	meta.Annotations = keepAnnotations(pvc.Annotations, claimAnnotations...)
	return &v1.PersistentVolumeClaim{
		ObjectMeta: meta,
		Spec: v1.PersistentVolumeClaimSpec{
			Resources: v1.VolumeResourceRequirements{
				Requests: resourceLists.intern(pvc.Spec.Resources.Requests),
				Limits:   resourceLists.intern(pvc.Spec.Resources.Limits),
			},
			VolumeName:                pvc.Spec.VolumeName,
			VolumeAttributesClassName: pvc.Spec.VolumeAttributesClassName,
		},
		Status: st,
	}
}

func slimVolume(pv *v1.PersistentVolume, keepAffinity bool) *v1.PersistentVolume {
	out := &v1.PersistentVolume{
		ObjectMeta: slimMeta(&pv.ObjectMeta),
		Spec: v1.PersistentVolumeSpec{
			Capacity:                  resourceLists.intern(pv.Spec.Capacity),
			AccessModes:               internModes(pv.Spec.AccessModes),
			ClaimRef:                  pv.Spec.ClaimRef,
			VolumeMode:                internVolumeMode(pv.Spec.VolumeMode),
			MountOptions:              pv.Spec.MountOptions,
			VolumeAttributesClassName: pv.Spec.VolumeAttributesClassName,
		},
		Status: v1.PersistentVolumeStatus{Phase: v1.PersistentVolumePhase(internString(string(pv.Status.Phase)))},
	}
	out.Annotations = keepAnnotations(pv.Annotations, expand.AnnPreResizeCapacity, expand.AnnControllerExpanded, csi.AnnModifySecretName, csi.AnnModifySecretNamespace)
	if migration.HasInTreeSource(pv) {
		out.Spec.PersistentVolumeSource = pv.Spec.PersistentVolumeSource
		out.Spec.NodeAffinity = pv.Spec.NodeAffinity
		out.Labels = pv.Labels
	}
	if keepAffinity {
		out.Spec.NodeAffinity = pv.Spec.NodeAffinity
	}
	if ref := out.Spec.ClaimRef; ref != nil {
		// The decoded reference belongs to this object alone; share its repeated strings.
		ref.Kind, ref.APIVersion, ref.Namespace = internString(ref.Kind), internString(ref.APIVersion), internString(ref.Namespace)
	}
	if c := pv.Spec.CSI; c != nil {
		out.Spec.CSI = &v1.CSIPersistentVolumeSource{
			Driver:                    internString(c.Driver),
			VolumeHandle:              c.VolumeHandle,
			FSType:                    internString(c.FSType),
			ControllerExpandSecretRef: c.ControllerExpandSecretRef,
		}
	}
	return out
}

// internString returns the canonical copy of a string that many cached objects hold (a
// namespace, a driver name, a phase): one copy in memory instead of one per object. Unused
// copies are garbage collected (package unique).
func internString(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// accessModes are shared single-mode accessModes slices.
var accessModes = map[v1.PersistentVolumeAccessMode][]v1.PersistentVolumeAccessMode{
	v1.ReadWriteOnce:    {v1.ReadWriteOnce},
	v1.ReadOnlyMany:     {v1.ReadOnlyMany},
	v1.ReadWriteMany:    {v1.ReadWriteMany},
	v1.ReadWriteOncePod: {v1.ReadWriteOncePod},
}

func internModes(m []v1.PersistentVolumeAccessMode) []v1.PersistentVolumeAccessMode {
	if len(m) == 1 {
		if shared, ok := accessModes[m[0]]; ok {
			return shared
		}
	}
	return m
}

var (
	volumeModeFilesystem = v1.PersistentVolumeFilesystem
	volumeModeBlock      = v1.PersistentVolumeBlock
)

func internVolumeMode(m *v1.PersistentVolumeMode) *v1.PersistentVolumeMode {
	switch {
	case m == nil:
		return nil
	case *m == v1.PersistentVolumeFilesystem:
		return &volumeModeFilesystem
	case *m == v1.PersistentVolumeBlock:
		return &volumeModeBlock
	}
	return m
}

// resourceLists shares equal ResourceLists (spec.resources.requests, status.capacity and
// allocatedResources of PVCs, spec.capacity of PVs) among cached objects: most claims of a
// cluster have one of a handful of sizes, and a map costs ~600 B even with a single entry (a
// Go map allocates a group of 8 slots, and a Quantity is 56 B).
var resourceLists = &listInterner{max: 1024}

// listInterner maps the content of a ResourceList to one shared map. It holds at most max
// lists; when full it starts over, which bounds it when sizes keep changing (objects keep the
// lists they already share).
type listInterner struct {
	mu    sync.Mutex
	max   int
	lists map[string]v1.ResourceList
}

func (in *listInterner) intern(l v1.ResourceList) v1.ResourceList {
	if len(l) == 0 {
		return l
	}
	key := listKey(l)
	in.mu.Lock()
	defer in.mu.Unlock()
	if shared, ok := in.lists[key]; ok {
		return shared
	}
	if in.lists == nil || len(in.lists) >= in.max {
		in.lists = make(map[string]v1.ResourceList, in.max)
	}
	in.lists[key] = l
	return l
}

// listKey identifies a ResourceList by what the resizer can observe of it: names, values and
// formats (the canonical string of a quantity is a function of its value and format, and it is
// all the resizer ever prints or writes of one).
func listKey(l v1.ResourceList) string {
	names := make([]string, 0, len(l))
	for name := range l {
		names = append(names, string(name))
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		q := l[v1.ResourceName(name)]
		b.WriteString(name)
		b.WriteByte('=')
		b.WriteString(string(q.Format))
		b.WriteByte(':')
		b.WriteString(q.String())
		b.WriteByte(';')
	}
	return b.String()
}

// leaseName is upstream external-resizer's Lease name for a driver: "external-resizer-" and
// the driver name, sanitized as csi-lib-utils sanitizes it (every character a Lease name cannot
// hold turned into "-", and an "X" appended when it would end in "-"). Sanitized here so the
// name is visible, and testable, where it is chosen.
func leaseName(driver string) string {
	return lifecycle.SanitizeName("external-resizer-" + driver)
}

// newElector prepares the leader election with --leader-election, nil without.
func newElector(ctx context.Context, config *rest.Config, opts *Options, driverName string, mux *http.ServeMux) (*lifecycle.Elector, error) {
	if !opts.Common.LeaderElection {
		return nil, nil
	}
	e, err := leaderElection(config, opts, driverName, mux)
	if err != nil {
		return nil, err
	}
	return lifecycle.NewElector(ctx, e)
}

// leaderElection is the sidecar's Lease-based leader election, as external-resizer's
// (csi-lib-utils) with the flags' settings: the Lease name is upstream's (leaseName), so an
// upgrade from external-resizer keeps one leader; its health check (/healthz/leader-election)
// is served when the HTTP endpoint is on; the Lease is released on the stop only with
// ReleaseLeaderElectionOnExit, as in external-resizer. The identity is the host name plus a
// random suffix (lifecycle.Identity).
func leaderElection(config *rest.Config, opts *Options, driverName string, mux *http.ServeMux) (lifecycle.Election, error) {
	// A client of its own, so a throttled controller cannot starve lease renewals.
	leClient, err := kubernetes.NewForConfig(config)
	if err != nil {
		return lifecycle.Election{}, fmt.Errorf("creating the leader election client: %w", err)
	}
	identity, err := lifecycle.Identity()
	if err != nil {
		return lifecycle.Election{}, err
	}
	e := lifecycle.Election{
		Client:        leClient,
		Lease:         leaseName(driverName),
		Namespace:     opts.Common.LeaderElectionNamespace,
		Identity:      identity,
		Labels:        opts.Common.LeaderElectionLabels,
		LeaseDuration: opts.Common.LeaderElectionLeaseDuration,
		RenewDeadline: opts.Common.LeaderElectionRenewDeadline,
		RetryPeriod:   opts.Common.LeaderElectionRetryPeriod,
		Release:       opts.FeatureGates.Enabled(features.ReleaseLeaderElectionOnExit),
	}
	if opts.HTTPAddress() != "" {
		e.Health = mux
	}
	return e, nil
}
