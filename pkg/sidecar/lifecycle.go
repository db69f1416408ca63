package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/features"
)

// stopGracePeriod is how long, beyond one CSI call (--timeout), a stopping process waits for
// the controller's workers to finish the item they are on.
const stopGracePeriod = 5 * time.Second

// runUntilStopped runs the controller (runController) until ctx ends (SIGTERM, SIGINT) or the
// controller fails; with --leader-election only while this process leads.
//
// On the signal the controller stops and its workers finish the item they are on. With
// ReleaseLeaderElectionOnExit the Lease is released after that, and only after that: released
// earlier, a standby could start on a PVC this process is still writing. Without the gate (its
// default, as in external-resizer) the Lease is left to expire, and a standby takes over after
// --leader-election-lease-duration.
func runUntilStopped(ctx context.Context, opts *Options, config *rest.Config, driverName string, mux *http.ServeMux, runController func(context.Context) error) error {
	started := make(chan struct{})
	done := make(chan error, 2)
	start := func(leading context.Context) {
		close(started)
		ctrlCtx, cancel := context.WithCancel(leading)
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		done <- runController(ctrlCtx)
	}
	if !opts.Common.LeaderElection {
		go start(ctx)
		_, err := waitStopped(ctx, opts.Timeout+stopGracePeriod, started, done)
		return err
	}
	// The election's own context: the signal does not end it, so that leading (and renewing)
	// lasts as long as the controller runs.
	leaseCtx := context.WithoutCancel(ctx)
	var release context.CancelFunc
	if opts.FeatureGates.Enabled(features.ReleaseLeaderElectionOnExit) {
		leaseCtx, release = context.WithCancel(leaseCtx)
		defer release()
	}
	le, err := newLeaderElection(leaseCtx, config, opts, driverName, mux, start)
	if err != nil {
		return err
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if err := le.Run(); err != nil {
			done <- fmt.Errorf("leader election: %w", err)
		}
	}()
	stopped, err := waitStopped(ctx, opts.Timeout+stopGracePeriod, started, done)
	if release == nil {
		return err
	}
	if !stopped {
		klog.FromContext(ctx).Info("The controller did not stop in time: the Lease is not released, a standby takes over when it expires")
		return err
	}
	// csi-lib-utils releases the Lease, then ends the process (exit status 1, "Stopped leading")
	// as it does whenever leading stops; wait for that, within a renewal's time.
	release()
	select {
	case <-ended:
	case <-time.After(opts.Common.LeaderElectionRenewDeadline):
	}
	return err
}

// waitStopped waits until the controller ends by itself (its error), or ctx ends; then, if the
// controller had started, until it stops, at most grace. stopped says nothing runs any more.
// Once ctx has ended, what the controller returns is the stop's doing (e.g. caches that could
// not sync because the stop came first), not an error.
func waitStopped(ctx context.Context, grace time.Duration, started <-chan struct{}, done <-chan error) (stopped bool, err error) {
	select {
	case err := <-done:
		if ctx.Err() != nil {
			return true, nil
		}
		return true, err
	case <-ctx.Done():
	}
	select {
	case <-started:
	default:
		return true, nil // a standby, or stopped before the driver was ready
	}
	select {
	case <-done:
		return true, nil
	case <-time.After(grace):
		return false, nil
	}
}

// checkVolumeAttributesClass decides, and says in one log line, whether VolumeAttributesClass
// modification runs (docs/design.md §2.11): the gate is on, and the driver advertises
// MODIFY_VOLUME. As in external-resizer, a gate left at its default is switched off when the
// apiserver does not serve storage.k8s.io/v1 VolumeAttributesClass.
func checkVolumeAttributesClass(logger klog.Logger, d discovery.DiscoveryInterface, gate featuregate.MutableVersionedFeatureGate, driver csi.Driver) bool {
	if !gate.Enabled(features.VolumeAttributesClass) {
		return false
	}
	var served bool
	var err error
	explicit := gate.ExplicitlySet(features.VolumeAttributesClass)
	if !explicit {
		served, err = features.VolumeAttributesClassServed(d)
	}
	on, msg := volumeAttributesClassDecision(explicit, served, err, driver)
	if !explicit && err == nil && !served {
		// The decision's line says why: override without featuregate's own warning line.
		if g, ok := gate.(featuregate.MutableFeatureGateWithLogger); ok {
			_ = g.OverrideDefaultWithLogger(logr.Discard(), features.VolumeAttributesClass, false)
		}
	}
	if err != nil {
		logger.Info(msg, "discoveryError", err.Error())
		return on
	}
	logger.Info(msg)
	return on
}

// volumeAttributesClassDecision decides, for a VolumeAttributesClass gate that is on, whether
// modification runs and what to say: explicit is whether --feature-gates set the gate, served
// and err what discovery said of storage.k8s.io/v1 VolumeAttributesClass (not asked when
// explicit). A failed check keeps the gate on, as in external-resizer.
func volumeAttributesClassDecision(explicit, served bool, err error, driver csi.Driver) (on bool, msg string) {
	switch {
	case !explicit && err == nil && !served:
		return false, "VolumeAttributesClass feature gate switched off: the apiserver does not serve storage.k8s.io/v1 VolumeAttributesClass"
	case !driver.ControllerModify:
		return false, "VolumeAttributesClass modification off: CSI driver " + driver.Name + " does not advertise the MODIFY_VOLUME controller capability"
	}
	return true, "VolumeAttributesClass modification on: changes of a PVC's volumeAttributesClassName call ControllerModifyVolume of " + driver.Name
}
