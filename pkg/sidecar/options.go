// Package sidecar turns the command line of csi-resizer into a running controller: flags (the
// upstream external-resizer's, with the same names and defaults), logging, feature gates, the
// driver handshake, the informers, the HTTP endpoint and leader election.
package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	cflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/internal/logging"
	"github.com/csi-resizer/csi-resizer/pkg/features"
)

// Options are the sidecar's flags that csi-lib-utils' standardflags does not already define.
type Options struct {
	Common *standardflags.SidecarConfiguration

	Master  string
	Timeout time.Duration
	// ResizeTimeout and ModifyTimeout bound each ControllerExpandVolume and
	// ControllerModifyVolume call. ResolveTimeouts applies upstream's precedence.
	ResizeTimeout          time.Duration
	ModifyTimeout          time.Duration
	Workers                int
	ResyncPeriod           time.Duration
	RetryIntervalStart     time.Duration
	RetryIntervalMax       time.Duration
	HandleVolumeInUseError bool
	ExtraModifyMetadata    bool
	// NodeDeployment and NodeName: one instance per node, each handling the volumes local to
	// its node (docs/design.md §2.12). NodeName is --node-name, else $NODE_NAME
	// (ResolveNodeName).
	NodeDeployment bool
	NodeName       string
	// FeatureGates holds the gates' values once ApplyFeatureGates has run.
	FeatureGates featuregate.MutableVersionedFeatureGate
	// Logging is component-base's logging configuration (--logging-format, -v, --vmodule,
	// --log-flush-frequency and the --log-{text,json}-* options), set up as statefulset-resizer
	// sets up its own.
	Logging *logging.Logging

	// gates are the --feature-gates values as given, applied by ApplyFeatureGates once
	// logging is configured: setting a GA gate logs a warning, which must come out in the
	// chosen format.
	gates map[string]bool
	// startupNotes are what --automaxprocs reports while the flags are parsed, before
	// logging is configured; LogStartupNotes logs them.
	startupNotes []string
}

// AddFlags registers every flag on fs. standardflags registers the flags shared by all CSI
// sidecars (--csi-address, --kubeconfig, leader election, QPS, HTTP endpoint, --automaxprocs...)
// and component-base the logging flags, so they mean exactly what they mean in the other
// sidecars.
func AddFlags(fs *flag.FlagSet) *Options {
	o := &Options{Common: &standardflags.Configuration, FeatureGates: features.NewGate(), Logging: logging.New("csi-resizer")}
	// standardflags registers --metrics-path and --automaxprocs on flag.CommandLine whatever set
	// it is given: point the global set at fs meanwhile, so every flag lands in fs.
	saved := flag.CommandLine
	flag.CommandLine = fs
	defer func() { flag.CommandLine = saved }()
	standardflags.RegisterCommonFlags(fs)
	standardflags.AddAutomaxprocs(func(format string, args ...any) {
		o.startupNotes = append(o.startupNotes, fmt.Sprintf(format, args...))
	})
	fs.StringVar(&o.Master, "master", "", "Master URL to build a client config from. Either this or kubeconfig needs to be set if the resizer is being run out of cluster.")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "Timeout for waiting for the CSI driver socket and for its start-up calls. When set explicitly, it is also the timeout of every ControllerExpandVolume and ControllerModifyVolume call, overriding --resize-timeout and --modify-timeout (as upstream).")
	fs.DurationVar(&o.ResizeTimeout, "resize-timeout", 10*time.Second, "Timeout of each ControllerExpandVolume call. Ignored when --timeout is set explicitly.")
	fs.DurationVar(&o.ModifyTimeout, "modify-timeout", 10*time.Second, "Timeout of each ControllerModifyVolume call. Ignored when --timeout is set explicitly.")
	fs.IntVar(&o.Workers, "workers", 10, "Number of PVCs processed concurrently.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", 10*time.Minute, "Resync period for the informer caches.")
	fs.DurationVar(&o.RetryIntervalStart, "retry-interval-start", time.Second, "Initial retry interval of a failed volume expansion. It doubles with each failure, up to retry-interval-max.")
	fs.DurationVar(&o.RetryIntervalMax, "retry-interval-max", 5*time.Minute, "Maximum retry interval of a failed volume expansion; also the retry interval of infeasible expansions.")
	fs.BoolVar(&o.HandleVolumeInUseError, "handle-volume-inuse-error", true, "Wait, instead of retrying, while a pod uses a volume that the driver can only expand offline (FAILED_PRECONDITION). Watches pods only when needed.")
	fs.BoolVar(&o.ExtraModifyMetadata, "extra-modify-metadata", false, "Add the PVC name and namespace and the PV name (csi.storage.k8s.io/pvc/name, csi.storage.k8s.io/pvc/namespace, csi.storage.k8s.io/pv/name) to the mutable parameters of ControllerModifyVolume.")
	fs.BoolVar(&o.NodeDeployment, "node-deployment", false, "Run one instance per node, next to a driver whose controller service serves that node's volumes (a DaemonSet): each instance handles only the volumes whose PersistentVolume node affinity pins them to its node. The node is named by --node-name or the NODE_NAME environment variable. Cannot be combined with --leader-election.")
	fs.StringVar(&o.NodeName, "node-name", "", "With --node-deployment, the name of this instance's Node; default: the NODE_NAME environment variable (set it from the downward API's spec.nodeName).")
	fs.Var(&featureGateFlag{gate: o.FeatureGates, values: cflag.NewMapStringBool(&o.gates)}, "feature-gates",
		"A set of key=value pairs that describe feature gates (those of external-resizer, with its defaults). Options are:\n"+strings.Join(features.Help(o.FeatureGates), "\n"))
	o.Logging.AddGoFlags(fs)
	return o
}

// Validate checks the flags that can be checked before connecting anywhere. Each problem names
// the flag and the fix, and all of them come back as one line joined by "; ": the binary
// prints the error as its single line on stderr, where errors.Join's newlines would split it.
func (o *Options) Validate() error {
	var errs []string
	if o.Workers <= 0 {
		errs = append(errs, fmt.Sprintf("--workers must be positive, got %d", o.Workers))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Sprintf("--timeout must be positive, got %s", o.Timeout))
	}
	if o.ResizeTimeout <= 0 {
		errs = append(errs, fmt.Sprintf("--resize-timeout must be positive, got %s", o.ResizeTimeout))
	}
	if o.ModifyTimeout <= 0 {
		errs = append(errs, fmt.Sprintf("--modify-timeout must be positive, got %s", o.ModifyTimeout))
	}
	if o.RetryIntervalStart <= 0 {
		errs = append(errs, fmt.Sprintf("--retry-interval-start must be positive, got %s", o.RetryIntervalStart))
	}
	if o.RetryIntervalStart > o.RetryIntervalMax {
		errs = append(errs, fmt.Sprintf("--retry-interval-start (%s) must not be greater than --retry-interval-max (%s)", o.RetryIntervalStart, o.RetryIntervalMax))
	}
	if o.Common.HttpEndpoint != "" && o.Common.MetricsAddress != "" {
		errs = append(errs, "only one of --http-endpoint and --metrics-address (deprecated) can be set: use --http-endpoint")
	}
	if o.Common.KubeAPIQPS <= 0 || o.Common.KubeAPIBurst <= 0 {
		errs = append(errs, fmt.Sprintf("--kube-api-qps and --kube-api-burst must be positive, got %v and %d", o.Common.KubeAPIQPS, o.Common.KubeAPIBurst))
	}
	if o.Common.CSIAddress == "" {
		errs = append(errs, "--csi-address must not be empty")
	}
	errs = append(errs, o.validateNodeDeployment()...)
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

// validateNodeDeployment checks --node-deployment against the flags it needs or excludes.
func (o *Options) validateNodeDeployment() []string {
	switch {
	case !o.NodeDeployment && o.NodeName != "":
		return []string{"--node-name is only used with --node-deployment: add --node-deployment or drop --node-name"}
	case !o.NodeDeployment:
		return nil
	}
	var errs []string
	if o.Common.LeaderElection {
		errs = append(errs, "--node-deployment and --leader-election cannot be used together: each node's instance handles only its node's volumes, so none waits for a Lease; drop --leader-election")
	}
	if o.NodeName == "" {
		errs = append(errs, "--node-deployment needs this instance's node name: set the NODE_NAME environment variable (from the downward API's spec.nodeName) or --node-name")
	}
	return errs
}

// ResolveNodeName takes the node's name from NODE_NAME (getenv) when --node-deployment is on
// and --node-name is not given, as external-provisioner's and -snapshotter's node deployments
// do. Without --node-deployment the variable is ignored: pods often carry it for other reasons.
func (o *Options) ResolveNodeName(getenv func(string) string) {
	if o.NodeDeployment && o.NodeName == "" {
		o.NodeName = getenv("NODE_NAME")
	}
}

// ResolveTimeouts applies upstream's precedence of the call timeouts (kubernetes-csi/
// external-resizer#596) once fs is parsed: a --timeout given on the command line, even at its
// default value, is the deadline of both calls, whatever --resize-timeout and --modify-timeout
// say; otherwise each of those is its call's own. So a chart written for the older binaries,
// which knew only --timeout, keeps its meaning. When --timeout overrides one of them that was
// set too, a start-up note says so: the flag the user wrote has no effect.
func (o *Options) ResolveTimeouts(fs *flag.FlagSet) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["timeout"] {
		return
	}
	for _, name := range []string{"resize-timeout", "modify-timeout"} {
		if set[name] {
			o.startupNotes = append(o.startupNotes, fmt.Sprintf("--timeout=%s is set, so it overrides --%s (upstream's precedence): drop --timeout to use --%s", o.Timeout, name, name))
		}
	}
	o.ResizeTimeout, o.ModifyTimeout = o.Timeout, o.Timeout
}

// CallTimeout is the longest a driver call may take: what a stopping worker may still wait for.
func (o *Options) CallTimeout() time.Duration {
	return max(o.ResizeTimeout, o.ModifyTimeout)
}

// HTTPAddress is the address of the diagnostics server, "" when off.
func (o *Options) HTTPAddress() string {
	if o.Common.HttpEndpoint != "" {
		return o.Common.HttpEndpoint
	}
	return o.Common.MetricsAddress
}

// featureGateFlag is --feature-gates: key=value pairs, repeatable, as external-resizer's. A
// gate this sidecar does not know is refused while parsing, so that the error names the flag.
type featureGateFlag struct {
	gate   featuregate.MutableFeatureGate
	values *cflag.MapStringBool
}

func (f *featureGateFlag) String() string {
	if f.values == nil {
		return ""
	}
	return f.values.String()
}

func (f *featureGateFlag) Set(v string) error {
	if err := f.values.Set(v); err != nil {
		return err
	}
	known := f.gate.GetAll()
	var unknown []string
	for name := range *f.values.Map {
		if _, ok := known[featuregate.Feature(name)]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("unrecognized feature gate: %s", strings.Join(unknown, ", "))
	}
	return nil
}

// ApplyFeatureGates sets the --feature-gates values on FeatureGates. Call it once logging is
// configured.
func (o *Options) ApplyFeatureGates() error {
	if err := o.FeatureGates.SetFromMap(o.gates); err != nil {
		return fmt.Errorf("--feature-gates: %w", err)
	}
	return nil
}

// LogStartupNotes logs what the flags reported while they were parsed (--automaxprocs).
func (o *Options) LogStartupNotes(logger klog.Logger) {
	for _, note := range o.startupNotes {
		logger.Info(note)
	}
}
