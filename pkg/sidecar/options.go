// Package sidecar turns the command line of csi-resizer into a running controller: flags (the
// upstream external-resizer's, with the same names and defaults), the driver handshake, the
// informers, the HTTP endpoint and leader election.
package sidecar

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/standardflags"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/features"
)

// Options are the sidecar's flags that csi-lib-utils' standardflags does not already define.
type Options struct {
	Common *standardflags.SidecarConfiguration

	Master                 string
	Timeout                time.Duration
	Workers                int
	ResyncPeriod           time.Duration
	RetryIntervalStart     time.Duration
	RetryIntervalMax       time.Duration
	HandleVolumeInUseError bool
	ExtraModifyMetadata    bool
	FeatureGates           featuregate.MutableFeatureGate
}

// AddFlags registers every flag on fs. standardflags registers the flags shared by all CSI
// sidecars (--csi-address, --kubeconfig, leader election, QPS, HTTP endpoint...) so they mean
// exactly what they mean in the other sidecars.
func AddFlags(fs *flag.FlagSet) *Options {
	o := &Options{Common: &standardflags.Configuration, FeatureGates: features.NewGate()}
	standardflags.RegisterCommonFlags(fs)
	if fs != flag.CommandLine && fs.Lookup("metrics-path") == nil {
		// standardflags defines --metrics-path on the global flag set only.
		fs.StringVar(&o.Common.MetricsPath, "metrics-path", "/metrics", "The HTTP path where prometheus metrics will be exposed. Default is `/metrics`.")
	}
	fs.StringVar(&o.Master, "master", "", "Master URL to build a client config from. Either this or kubeconfig needs to be set if the resizer is being run out of cluster.")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "Timeout for waiting for the CSI driver socket and for each CSI call.")
	fs.IntVar(&o.Workers, "workers", 10, "Number of PVCs processed concurrently.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", 10*time.Minute, "Resync period for the informer caches.")
	fs.DurationVar(&o.RetryIntervalStart, "retry-interval-start", time.Second, "Initial retry interval of a failed volume expansion. It doubles with each failure, up to retry-interval-max.")
	fs.DurationVar(&o.RetryIntervalMax, "retry-interval-max", 5*time.Minute, "Maximum retry interval of a failed volume expansion; also the retry interval of infeasible expansions.")
	fs.BoolVar(&o.HandleVolumeInUseError, "handle-volume-inuse-error", true, "Wait, instead of retrying, while a pod uses a volume that the driver can only expand offline (FAILED_PRECONDITION). Watches pods only when needed.")
	fs.BoolVar(&o.ExtraModifyMetadata, "extra-modify-metadata", false, "Accepted for compatibility with external-resizer. It adds PV/PVC metadata to ModifyVolume requests, and this sidecar does not implement VolumeAttributesClass modification, so it has no effect.")
	// KnownFeatures leaves out GA gates; this one can still be switched off, so list it.
	known := append(o.FeatureGates.KnownFeatures(), string(features.RecoverVolumeExpansionFailure)+"=true|false (GA - default=true)")
	fs.Var(featureGateFlag{o.FeatureGates}, "feature-gates", "A set of key=value pairs that describe feature gates. Options are:\n"+strings.Join(known, "\n"))
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
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

// HTTPAddress is the address of the diagnostics server, "" when off.
func (o *Options) HTTPAddress() string {
	if o.Common.HttpEndpoint != "" {
		return o.Common.HttpEndpoint
	}
	return o.Common.MetricsAddress
}

// WarnIgnored logs flags that are accepted for compatibility and do nothing here.
func (o *Options) WarnIgnored(logger klog.Logger) {
	if o.ExtraModifyMetadata {
		logger.Info("--extra-modify-metadata has no effect: this resizer does not implement VolumeAttributesClass modification (ModifyVolume)")
	}
}

// featureGateFlag adapts a feature gate to the standard flag package.
type featureGateFlag struct {
	gate featuregate.MutableFeatureGate
}

func (f featureGateFlag) String() string { return "" }

func (f featureGateFlag) Set(v string) error { return f.gate.Set(v) }
