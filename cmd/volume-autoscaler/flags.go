package main

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/csi-resizer/csi-resizer/internal/cli"
	"github.com/csi-resizer/csi-resizer/internal/logging"
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/controller"
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/kubeletstats"
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
)

type options struct {
	showVersion bool
	api         cli.API
	workers     int

	interval    time.Duration
	dryRun      bool
	concurrency int
	// kubelet is the stats client's configuration; addressTypes is its flag before parsing.
	kubelet      kubeletstats.Options
	addressTypes string

	// The policy defaults as given; validate parses them into defaults.
	threshold, inodesThreshold, increase, minIncrease, limit string
	defaults                                                 policy.Defaults

	le   cli.LeaderElection
	http cli.HTTP

	logging *logging.Logging
}

func addFlags(fs *pflag.FlagSet) *options {
	d := policy.NewDefaults()
	o := &options{logging: logging.New(command), defaults: d}
	fs.BoolVar(&o.showVersion, "version", false, "Show version.")
	o.api.AddFlags(fs)
	fs.IntVar(&o.workers, "workers", 10, "Number of PVCs decided on in parallel.")

	fs.DurationVar(&o.interval, "interval", time.Minute, "Time between two reads of the kubelets' volume stats (each read of a node is one GET /stats/summary).")
	fs.BoolVar(&o.dryRun, "dry-run", false, "Decide and report (events "+controller.EventDryRun+", logs, metric volume_autoscaler_dry_run_resizes_total) but change no PVC.")
	fs.StringVar(&o.kubelet.CAFile, "kubelet-certificate-authority", "", "PEM file of the CAs that sign the kubelets' serving certificates. Required unless --kubelet-insecure-tls.")
	fs.BoolVar(&o.kubelet.InsecureSkipVerify, "kubelet-insecure-tls", false, "Do not verify the kubelets' serving certificates (test clusters only: the ServiceAccount token is sent on the connection).")
	fs.StringVar(&o.addressTypes, "kubelet-preferred-address-types", "InternalIP,Hostname,ExternalIP", "The Node address types to reach a kubelet at, in order of preference.")
	fs.DurationVar(&o.kubelet.Timeout, "kubelet-timeout", kubeletstats.DefaultTimeout, "Timeout of one read of a kubelet's /stats/summary, from dialing to the last byte.")
	fs.IntVar(&o.concurrency, "kubelet-concurrency", 20, "Most kubelets read at the same time.")
	fs.Int64Var(&o.kubelet.MaxResponseBytes, "kubelet-max-response-bytes", kubeletstats.DefaultMaxResponseBytes, "Largest /stats/summary answer read from one kubelet; a larger one is an error for that node.")
	fs.StringVar(&o.kubelet.TokenFile, "token-file", serviceAccountToken, "File with the bearer token sent to the kubelets (re-read as it rotates); the kubelet authorizes it as nodes/stats get. Empty: no token.")

	fs.StringVar(&o.threshold, "default-threshold", d.Threshold.String(), "Free-space threshold of a PVC without one: a percent of the file system's capacity or a quantity of free bytes.")
	fs.StringVar(&o.inodesThreshold, "default-inodes-threshold", d.InodesThreshold.String(), "Free-inodes threshold of a PVC without one, a percent.")
	fs.StringVar(&o.increase, "default-increase", d.Increase.String(), "Step of a PVC without one: a percent of the volume's size or a quantity.")
	fs.StringVar(&o.minIncrease, "default-min-increase", "1Gi", "Smallest step of a PVC without one, a quantity.")
	fs.StringVar(&o.limit, "default-limit", "", "Limit of a PVC without one, a quantity. Empty: a PVC without a limit is not autoscaled.")
	fs.DurationVar(&o.defaults.Cooldown, "cooldown", d.Cooldown, "Least time between two resizes of one volume, when its PVC and class do not set "+policy.AnnCooldown+".")
	fs.DurationVar(&o.defaults.ResizeWait, "resize-wait", d.ResizeWait, "How long a resize may take, from the request to a file system the kubelet reports as grown; after that the PVC is reported and left alone.")
	fs.BoolVar(&o.defaults.AllClasses, "all-storage-classes", false, "Opt in every StorageClass that allows volume expansion (as pvc-autoresizer's --no-annotation-check); "+policy.AnnAutoscale+": \"false\" still opts out.")

	o.le.AddFlags(fs, "Enable leader election (Lease \""+controller.Name+"\"). On SIGTERM the leader's workers finish the PVC they are on (at most "+workerGrace.String()+"), then the Lease is released for a standby to take over at once.")
	o.http.AddFlags(fs, "health checks")
	o.logging.AddFlags(fs)
	return o
}

func (o *options) validate() error {
	switch {
	case o.workers < 1:
		return fmt.Errorf("--workers must be positive, got %d", o.workers)
	case o.interval <= 0:
		return fmt.Errorf("--interval must be positive, got %s", o.interval)
	case o.kubelet.Timeout <= 0:
		return fmt.Errorf("--kubelet-timeout must be positive, got %s", o.kubelet.Timeout)
	case o.concurrency < 1:
		return fmt.Errorf("--kubelet-concurrency must be positive, got %d", o.concurrency)
	case o.kubelet.MaxResponseBytes <= 0:
		return fmt.Errorf("--kubelet-max-response-bytes must be positive, got %d", o.kubelet.MaxResponseBytes)
	case o.kubelet.CAFile == "" && !o.kubelet.InsecureSkipVerify:
		return fmt.Errorf("give --kubelet-certificate-authority (the CA of the kubelets' serving certificates), or --kubelet-insecure-tls for a test cluster")
	case o.kubelet.CAFile != "" && o.kubelet.InsecureSkipVerify:
		return fmt.Errorf("--kubelet-certificate-authority and --kubelet-insecure-tls exclude each other: give one")
	}
	types, err := kubeletstats.ParseAddressTypes(o.addressTypes)
	if err != nil {
		return fmt.Errorf("--kubelet-preferred-address-types: %w", err)
	}
	o.kubelet.AddressTypes = types
	if err := o.parseDefaults(); err != nil {
		return err
	}
	if err := o.api.Validate(); err != nil {
		return err
	}
	if err := o.http.Validate(); err != nil {
		return err
	}
	return o.le.Validate()
}

// parseDefaults reads the policy defaults' flags, naming the flag of a bad value.
func (o *options) parseDefaults() error {
	d := &o.defaults
	var ok bool
	if d.Threshold, ok = policy.ParseAmount(o.threshold); !ok {
		return fmt.Errorf("--default-threshold=%q: want a percent like \"10%%\" or a quantity like \"5Gi\"", o.threshold)
	}
	if d.InodesThreshold, ok = policy.ParsePercent(o.inodesThreshold); !ok {
		return fmt.Errorf("--default-inodes-threshold=%q: want a percent like \"10%%\"", o.inodesThreshold)
	}
	if d.Increase, ok = policy.ParseAmount(o.increase); !ok {
		return fmt.Errorf("--default-increase=%q: want a percent like \"10%%\" or a quantity like \"1Gi\"", o.increase)
	}
	if d.MinIncrease, ok = policy.ParseBytes(o.minIncrease); !ok {
		return fmt.Errorf("--default-min-increase=%q: want a quantity above zero like \"1Gi\"", o.minIncrease)
	}
	d.Limit = 0
	if o.limit != "" {
		if d.Limit, ok = policy.ParseBytes(o.limit); !ok {
			return fmt.Errorf("--default-limit=%q: want a quantity above zero like \"100Gi\", or nothing for no default limit", o.limit)
		}
	}
	if err := d.Validate(); err != nil {
		return fmt.Errorf("the policy defaults (--default-*, --cooldown, --resize-wait): %w", err)
	}
	return nil
}
