// Package controller runs the sidecar's reconcile loop: it watches the PVCs and PVs of one CSI
// driver, asks pkg/resize what to do with each PVC, and carries the plan out: status patches
// through pkg/status, the driver call through pkg/csi, events and metrics.
//
// The controller decides nothing itself. Whatever it keeps in memory (the resourceVersions of
// its own writes, retry timers, whether an attempt was a recovery) is a cache or bookkeeping for
// metrics; every decision about sizes and states is re-derived from the PVC, so a restarted
// resizer makes the decision the crashed one would have made.
package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/slowset"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/inuse"
	"github.com/csi-resizer/csi-resizer/pkg/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/migration"
	"github.com/csi-resizer/csi-resizer/pkg/resize"
	"github.com/csi-resizer/csi-resizer/pkg/status"
)

// Event reasons on the PVC.
const (
	EventResizeSuccessful   = "VolumeResizeSuccessful"
	EventResizeRecovered    = "VolumeResizeRecovered"
	EventFileSystemRequired = "FileSystemResizeRequired"
	EventResizeFailed       = "VolumeResizeFailed"
)

// Config is everything the controller needs from outside.
type Config struct {
	Driver   csi.Driver
	Expander csi.Expander
	// Client is used for secrets of controller-expand, the lazy pod informer, and to read a
	// PVC again when the write recording a driver's answer conflicts; writes go through
	// Writer.
	Client   kubernetes.Interface
	Writer   status.Writer
	Recorder record.EventRecorder
	Metrics  *metrics.Recorder
	Clock    clock.WithTicker

	RetryIntervalStart time.Duration
	RetryIntervalMax   time.Duration
	// HandleVolumeInUse enables the in-use check for offline expansion (rule 9).
	HandleVolumeInUse bool
	// Legacy is RecoverVolumeExpansionFailure=false.
	Legacy bool
	// AnnotateFsResize writes the pre-resize capacity annotation on the PV.
	AnnotateFsResize bool
}

// Controller reconciles the PVCs of one driver.
type Controller struct {
	cfg       Config
	pvcLister corelisters.PersistentVolumeClaimLister
	pvLister  corelisters.PersistentVolumeLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	slow      *slowset.SlowSet
	pods      *inuse.Tracker

	mu     sync.Mutex
	claims map[string]*claimMemory

	// eventHandled, when set, is told of every PVC and PV event once its handler has run (and
	// queued whatever it queues). Tests set it, before the informers start, to know when the
	// controller has seen all of its own writes; it is nil in the sidecar.
	eventHandled func(obj any)
}

// maxOwnVersions bounds the resourceVersions remembered per PVC: a few syncs' worth, in case
// echoes arrive late, without growing when some never arrive (a relist skips versions).
const maxOwnVersions = 8

// staleCacheRetry is how soon a PVC is looked at again when the informer cache has not yet
// caught up with the controller's own latest write.
const staleCacheRetry = 100 * time.Millisecond

// claimMemory is what the controller remembers about one PVC between syncs. It is dropped when
// the PVC is deleted (rule 10), and losing it in a restart changes no decision.
type claimMemory struct {
	// ownVersions are the resourceVersions of the controller's latest writes to the PVC, oldest
	// first, so the update events of those writes are not processed again. One sync writes
	// up to two versions, and the watch may deliver the echo of the first after the second
	// was written, so remembering only the last one is not enough.
	ownVersions []string
	// superseded are the resourceVersions the controller's writes were based on (the cached
	// object each write started from), oldest first. A cache still at one of them has not
	// seen the write that replaced it: deciding on it would start the finished step again.
	superseded []string
	// writing: a status write is under way, and its resourceVersion is not known yet.
	writing bool
	// held are the resourceVersions of updates seen while writing, to be told apart from the
	// write's own echo once it returns.
	held []string
	// since is when the current expansion was first seen, for the duration histogram.
	since time.Time
	// failureObserved: the histogram already has this expansion's failure.
	failureObserved bool
	// recovery: the expansion under way lowers the allocated size (KEP-1790 recovery). It is
	// counted once, when its outcome is known: success when the expansion finishes (after the
	// node step, if the driver asked for one), failure when it becomes ControllerResizeInfeasible
	// or NodeResizeInfeasible. Final and transient errors keep it: the retry that follows has
	// alloc == target, so its plan no longer says "recovery", and only this flag does.
	recovery bool
	// node is the node step this resizer handed over (NodeResizePending) and now waits to see
	// finish, to record the expansion's duration and the recovery's outcome then; nil when
	// the resizer is not waiting for the node.
	node *nodeStep
	// inUseFailure: the driver said FAILED_PRECONDITION, so wait for pods to let go.
	inUseFailure bool
	// inUseReported: the "in use" event was sent for this wait already.
	inUseReported bool
	// failedRequest is the requested size whose expansion was infeasible, so a new request
	// can skip the slow retry in legacy mode, where allocatedResources does not record it.
	failedRequest *resource.Quantity
}

// nodeStep is an expansion whose controller part succeeded and whose node part is pending.
type nodeStep struct {
	// from is status.capacity before the expansion, to the size handed to the node.
	from, to resource.Quantity
}

// New wires the controller to its informers.
func New(cfg Config, pvcs coreinformers.PersistentVolumeClaimInformer, pvs coreinformers.PersistentVolumeInformer) *Controller {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	c := &Controller{
		cfg:       cfg,
		pvcLister: pvcs.Lister(),
		pvLister:  pvs.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rateLimiter(cfg),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "csi-resizer", Clock: cfg.Clock}),
		slow:   slowset.NewSlowSet(cfg.RetryIntervalMax),
		claims: map[string]*claimMemory{},
	}
	claims, _ := pvcs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.claimAdded,
		UpdateFunc: c.claimUpdated,
		DeleteFunc: c.claimDeleted,
	})
	volumes, _ := pvs.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.volumeAdded,
		UpdateFunc: c.volumeUpdated,
	})
	// The registrations' HasSynced, not the informers': workers start only after the handlers
	// have seen the whole initial list. Otherwise the PV informer's late add of a PVC's volume
	// re-queues a PVC a worker is already resizing, and that second pass can run on a cache
	// that has not caught up with the first pass's writes.
	c.synced = []cache.InformerSynced{claims.HasSynced, volumes.HasSynced}
	return c
}

// rateLimiter is the per-PVC retry backoff after an error: from --retry-interval-start,
// doubling up to --retry-interval-max.
func rateLimiter(cfg Config) workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.RetryIntervalStart, cfg.RetryIntervalMax)
}

// Run processes PVCs with the given number of workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	c.pods = inuse.New(ctx, c.cfg.Client, func(keys []string) {
		for _, k := range keys {
			c.queue.Add(k)
		}
	})
	if !cache.WaitForNamedCacheSync("csi-resizer", ctx.Done(), c.synced...) {
		return errors.New("informer caches did not sync")
	}
	if c.cfg.HandleVolumeInUse && c.cfg.Driver.OfflineOnly {
		// The driver declares offline-only expansion: every expansion needs the check.
		if err := c.pods.Start(ctx); err != nil {
			return err
		}
	}
	go c.slow.Run(ctx.Done())
	logger.Info("Starting workers", "driver", c.cfg.Driver.Name, "workers", workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.work, time.Second) })
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// ClaimStates lists the driver's PVCs from the informer cache, for the scrape-time gauges. It
// returns nil, which the collector exports as nothing at all, until the informers have synced
// (and on a standby replica, whose informers never start): a cache that is still listing would
// report the PVCs it has not reached yet as absent, and an infeasible PVC missing from one
// scrape after a restart resets the "for: 15m" of CSIResizerVolumeInfeasible. Once synced the
// result is never nil, even with no PVCs, so the collector exports its zeros.
func (c *Controller) ClaimStates() []metrics.ClaimState {
	if !c.hasSynced() {
		return nil
	}
	pvcs, err := c.pvcLister.List(labelsEverything)
	if err != nil {
		return nil
	}
	out := make([]metrics.ClaimState, 0, len(pvcs))
	for _, pvc := range pvcs {
		if _, ok := c.volumeOf(pvc); !ok {
			continue
		}
		out = append(out, metrics.ClaimState{Namespace: pvc.Namespace, Name: pvc.Name, State: pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]})
	}
	return out
}

// hasSynced reports whether the event handlers have seen the informers' initial lists.
func (c *Controller) hasSynced() bool {
	for _, synced := range c.synced {
		if !synced() {
			return false
		}
	}
	return true
}

func (c *Controller) work(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	next, err := c.sync(ctx, key)
	switch {
	case err != nil:
		klog.FromContext(ctx).Error(err, "Resize attempt failed; retrying with backoff", "pvc", key)
		c.queue.AddRateLimited(key)
	case next > 0:
		c.queue.Forget(key)
		c.queue.AddAfter(key, next)
	default:
		c.queue.Forget(key)
	}
	return true
}

// sync reconciles one PVC. It returns an error for a retry with backoff, or a delay after which
// the PVC must be looked at again (the slow retry of an infeasible expansion).
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	pvc, err := c.pvcLister.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if c.isStale(key, pvc.ResourceVersion) {
		// The cache holds an older version written by this controller, and not yet its latest
		// write: deciding on it would repeat the step that write recorded (call the driver
		// again, send the event again). Look again once the cache has caught up.
		klog.FromContext(ctx).V(4).Info("The informer cache is behind the controller's own write; retrying shortly", "pvc", key, "resourceVersion", pvc.ResourceVersion)
		return staleCacheRetry, nil
	}
	pv, ok := c.volumeOf(pvc)
	if !ok {
		return 0, nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(pvc), "pv", klog.KObj(pv))
	ctx = klog.NewContext(ctx, logger)
	if pv, err = c.removePreResizeCapacity(ctx, pvc, pv); err != nil {
		return 0, err
	}

	obs := resize.Observe(pvc, pv, c.cfg.Driver.NodeOnly(), c.cfg.Legacy)
	c.observeNodeStep(ctx, key, pvc, obs)
	plan := resize.PlanExpansion(obs)
	logger.V(4).Info("Planned", "action", plan.Action, "target", plan.Target.String(), "recovery", plan.Recovery, "why", plan.Why)
	if plan.Action == resize.Nothing {
		c.endEpisodeIfDone(key, pvc)
		return 0, nil
	}
	if wait := c.slowRetryWait(key, pvc, obs); wait > 0 {
		logger.V(4).Info("Infeasible expansion: waiting for the slow retry or a new request", "wait", wait)
		return wait, nil
	}
	c.remember(key, func(m *claimMemory) {
		if m.since.IsZero() {
			m.since = c.startTime(pvc)
			// First seen already failed (after a restart): the failure was observed by the
			// process that saw it happen, and is not observed a second time.
			m.failureObserved = failedBefore(obs, c.cfg.Legacy)
		}
		// A new step starts: a node step this resizer was waiting for is not what happens now,
		// and the new step's outcome is what gets recorded.
		m.node = nil
	})
	switch plan.Action {
	case resize.RedriveNode:
		return 0, c.redriveNode(ctx, key, pvc, plan)
	case resize.ExpandNodeOnly:
		return 0, c.expandNodeOnly(ctx, key, pvc, pv, plan)
	default:
		return c.expandController(ctx, key, pvc, pv, plan)
	}
}

// volumeOf returns the PV of a bound PVC when the PV belongs to this driver (a CSI PV of the
// driver, or a migrated in-tree PV the PVC's storage-resizer annotation hands to it: see
// pkg/migration) and its claimRef points back at this very PVC (rule 1). The UID must match
// too, as upstream requires: a claimRef without one (pre-bound by name, not yet confirmed by
// the PV controller) or with another's (a deleted claim of the same name) does not prove the
// volume is this claim's.
func (c *Controller) volumeOf(pvc *v1.PersistentVolumeClaim) (*v1.PersistentVolume, bool) {
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != v1.ClaimBound {
		return nil, false
	}
	pv, err := c.pvLister.Get(pvc.Spec.VolumeName)
	if err != nil || !migration.Owns(c.cfg.Driver.Name, pvc, pv) {
		return nil, false
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace != pvc.Namespace || ref.Name != pvc.Name || ref.UID != pvc.UID {
		return nil, false
	}
	return pv, true
}

// slowRetryWait says how long an infeasible PVC must still wait (rule 8): the slow retry counts
// from the last failed attempt, taken from memory or, after a restart, from the PVC's condition.
// A request changed by the user (spec differs from what failed) goes at once.
func (c *Controller) slowRetryWait(key string, pvc *v1.PersistentVolumeClaim, obs resize.Observed) time.Duration {
	infeasible := obs.State == v1.PersistentVolumeClaimControllerResizeInfeasible || obs.State == v1.PersistentVolumeClaimNodeResizeInfeasible
	if c.cfg.Legacy {
		infeasible = obs.LastError == resize.ClassInfeasible
	}
	if !infeasible {
		c.slow.Remove(key)
		return 0
	}
	// Where the plan follows spec (a controller failure, or a node failure on a node-only
	// driver), a new request is the user's answer to the failure: no reason to wait.
	followsSpec := obs.State == v1.PersistentVolumeClaimControllerResizeInfeasible ||
		(obs.State == v1.PersistentVolumeClaimNodeResizeInfeasible && obs.NodeOnly)
	if !c.cfg.Legacy && followsSpec && (obs.Alloc == nil || obs.Alloc.Cmp(obs.Spec) != 0) {
		c.slow.Remove(key)
		return 0
	}
	// Legacy mode records no allocated size to compare with: only memory knows which request
	// failed (after a restart the wait is at most one slow interval).
	if m := c.memory(key); c.cfg.Legacy && m.failedRequest != nil && m.failedRequest.Cmp(obs.Spec) != 0 {
		c.slow.Remove(key)
		return 0
	}
	if _, ok := c.slow.Get(key); !ok {
		last, ok := lastFailure(pvc, obs.State)
		if !ok {
			// A failure we have no record of: retry now, and start counting from it.
			return 0
		}
		c.slow.Add(key, slowset.ObjectData{Timestamp: last})
	}
	return c.slow.TimeRemaining(key)
}

// lastFailure is when the failure behind an infeasible state happened, according to the PVC.
func lastFailure(pvc *v1.PersistentVolumeClaim, state v1.ClaimResourceStatus) (time.Time, bool) {
	want := v1.PersistentVolumeClaimControllerResizeError
	if state == v1.PersistentVolumeClaimNodeResizeInfeasible {
		want = v1.PersistentVolumeClaimNodeResizeError
	}
	for _, cond := range pvc.Status.Conditions {
		if cond.Type == want {
			t := cond.LastProbeTime.Time
			if cond.LastTransitionTime.After(t) {
				t = cond.LastTransitionTime.Time
			}
			return t, !t.IsZero()
		}
	}
	return time.Time{}, false
}

// markSlow starts the slow retry window of an infeasible PVC now.
func (c *Controller) markSlow(key string) {
	c.slow.Remove(key)
	c.slow.Add(key, slowset.ObjectData{Timestamp: c.cfg.Clock.Now()})
}

func (c *Controller) expandController(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, plan resize.Plan) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	if waiting, err := c.waitForPods(ctx, key, pvc); err != nil || waiting {
		return 0, err
	}
	req, err := c.expandRequest(ctx, pv, plan.Target)
	if err != nil {
		c.cfg.Recorder.Event(pvc, v1.EventTypeWarning, EventResizeFailed, err.Error())
		return 0, err
	}
	// Rule 3: record the target before calling the driver, guarded by resourceVersion so a
	// decision taken on a stale PVC is never written.
	started := resize.StartedStatus(pvc.Status, plan, c.cfg.Legacy, c.now())
	written, err := c.writeStatus(ctx, key, pvc, started, resize.WriteStarted, true)
	if err != nil {
		return 0, err
	}
	if plan.Recovery {
		c.remember(key, func(m *claimMemory) { m.recovery = true })
	}

	logger.V(2).Info("Calling ControllerExpandVolume", "volumeID", req.VolumeID, "requiredBytes", req.RequiredBytes)
	res, callErr := c.cfg.Expander.Expand(ctx, req)
	if callErr != nil {
		return c.expansionFailed(ctx, key, written, plan, callErr)
	}

	newSize := *resource.NewQuantity(res.CapacityBytes, resource.BinarySI)
	if newSize.Cmp(plan.Target) == 0 {
		newSize = plan.Target.DeepCopy() // keep the user's notation (e.g. "2Gi")
	}
	if _, err := c.cfg.Writer.PatchVolume(ctx, pv, newSize, c.preResizeAnnotation(pv, pvc, res.NodeExpansionRequired)); err != nil {
		// The volume did grow: the next attempt keeps the allocated size (state is still
		// ControllerResizeInProgress with no final error) and the driver call is idempotent.
		return 0, err
	}
	now := c.now()
	if _, err := c.recordOutcome(ctx, key, written, resize.ExpandedWrite(res.NodeExpansionRequired), func(st v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
		return resize.ExpandedStatus(st, plan, newSize, res.NodeExpansionRequired, c.cfg.Legacy, now)
	}); err != nil {
		return 0, err
	}
	c.expansionSucceeded(key, pvc, newSize, res.NodeExpansionRequired)
	return 0, nil
}

// expansionFailed records a failed ControllerExpandVolume (rule 6) and says when to retry.
func (c *Controller) expansionFailed(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, plan resize.Plan, callErr error) (time.Duration, error) {
	ce := resize.ClassifyError(callErr)
	c.cfg.Metrics.ExpandError(ce.Reason, string(ce.Class))
	now := c.now()
	if _, err := c.recordOutcome(ctx, key, pvc, resize.WriteFailed, func(st v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus {
		return resize.FailedStatus(st, ce, c.cfg.Legacy, now)
	}); err != nil {
		return 0, errors.Join(fmt.Errorf("ControllerExpandVolume: %w", callErr), err)
	}
	c.cfg.Recorder.Eventf(pvc, v1.EventTypeWarning, EventResizeFailed, "expanding the volume to %s failed (%s, %s): %s", plan.Target.String(), ce.Reason, ce.Class, ce.Message)

	m := c.memory(key)
	// Only infeasible settles a recovery as failed. After any other final error the retry
	// follows spec again and may well succeed (and after a transient one it keeps the target),
	// so the recovery flag is kept for the outcome of the retries.
	if ce.Class == resize.ClassInfeasible && m.recovery {
		c.cfg.Metrics.Recovery(false)
		c.remember(key, func(m *claimMemory) { m.recovery = false })
	}
	if ce.Class == resize.ClassInfeasible {
		if !m.failureObserved && !m.since.IsZero() {
			c.cfg.Metrics.ExpansionDone(false, c.cfg.Clock.Since(m.since))
			c.remember(key, func(m *claimMemory) { m.failureObserved = true })
		}
		// Rule 8: the slow retry starts at this, the first infeasible failure.
		failed := pvc.Spec.Resources.Requests[v1.ResourceStorage]
		c.remember(key, func(m *claimMemory) { m.failedRequest = &failed })
		c.markSlow(key)
		return c.cfg.RetryIntervalMax, nil
	}
	if ce.Reason == "FailedPrecondition" && c.cfg.HandleVolumeInUse {
		// Rule 9: likely an offline-only driver and a pod still using the volume.
		c.remember(key, func(m *claimMemory) { m.inUseFailure = true })
		if err := c.pods.Start(ctx); err != nil {
			return 0, err
		}
		if c.pods.InUse(pvc.Namespace, pvc.Name) {
			klog.FromContext(ctx).Info("Volume in use by a pod and the driver needs it offline: waiting for the pod to go")
			return 0, nil
		}
	}
	return 0, fmt.Errorf("ControllerExpandVolume (%s): %w", ce.Class, callErr)
}

// waitForPods reports whether the expansion must wait because a pod uses a volume that can
// only be expanded offline. The pod watcher tells the queue when the pod goes.
func (c *Controller) waitForPods(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim) (bool, error) {
	if !c.cfg.HandleVolumeInUse {
		return false, nil
	}
	m := c.memory(key)
	if !c.cfg.Driver.OfflineOnly && !m.inUseFailure {
		return false, nil
	}
	if err := c.pods.Start(ctx); err != nil {
		return false, err
	}
	if !c.pods.InUse(pvc.Namespace, pvc.Name) {
		c.remember(key, func(m *claimMemory) { m.inUseReported = false })
		return false, nil
	}
	if !m.inUseReported {
		c.cfg.Recorder.Eventf(pvc, v1.EventTypeWarning, EventResizeFailed,
			"CSI driver %s can only expand volumes that no pod uses; the expansion waits until the pods using this claim are gone", c.cfg.Driver.Name)
		c.remember(key, func(m *claimMemory) { m.inUseReported = true })
	}
	return true, nil
}

// expansionSucceeded records the end of the control-plane part of an expansion. When the node
// has a part to do, the expansion is not finished: its duration and a recovery's outcome are
// recorded when the resizer sees the node finish or fail (observeNodeStep).
func (c *Controller) expansionSucceeded(key string, pvc *v1.PersistentVolumeClaim, newSize resource.Quantity, nodeRequired bool) {
	m := c.memory(key)
	old := pvc.Status.Capacity[v1.ResourceStorage]
	if nodeRequired {
		c.cfg.Recorder.Eventf(pvc, v1.EventTypeNormal, EventFileSystemRequired,
			"the volume was expanded to %s in the control plane; waiting for the node to expand the file system", newSize.String())
		// The wait for the node is in memory only: a restarted resizer does not know it
		// handed this step over and records neither the duration nor the recovery of this
		// expansion. Only metrics and the VolumeResizeRecovered event depend on it, never a
		// decision.
		c.remember(key, func(m *claimMemory) {
			m.node = &nodeStep{from: old.DeepCopy(), to: newSize.DeepCopy()}
			m.inUseFailure, m.inUseReported = false, false
		})
		c.slow.Remove(key)
		return
	}
	took := c.elapsed(m.since)
	switch {
	case m.recovery:
		c.cfg.Recorder.Eventf(pvc, v1.EventTypeNormal, EventResizeRecovered,
			"recovered from a failed expansion: volume expanded from %s to %s in %s", old.String(), newSize.String(), took)
	default:
		c.cfg.Recorder.Eventf(pvc, v1.EventTypeNormal, EventResizeSuccessful,
			"volume expanded from %s to %s in %s", old.String(), newSize.String(), took)
	}
	if m.recovery {
		c.cfg.Metrics.Recovery(true)
	}
	if !m.since.IsZero() {
		c.cfg.Metrics.ExpansionDone(true, took)
	}
	c.remember(key, func(m *claimMemory) {
		m.recovery, m.since, m.failureObserved, m.inUseFailure, m.inUseReported = false, time.Time{}, false, false, false
	})
	c.slow.Remove(key)
}

// expandNodeOnly handles a driver without controller expansion: no CSI call, the PV capacity
// is set (lowered only in the KEP-1790 Case 2 recovery) and the node takes over.
func (c *Controller) expandNodeOnly(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, plan resize.Plan) error {
	// A target at or below the current capacity (the user cancelled back to it) leaves the node
	// nothing to do: the kubelet only expands when the PV is above status.capacity.
	pvcCap := pvc.Status.Capacity[v1.ResourceStorage]
	nodeRequired := plan.Target.Cmp(pvcCap) > 0
	// The PV first: the kubelet acts only once the PVC says NodeResizePending, and then it
	// must find the new capacity on the PV.
	if _, err := c.cfg.Writer.PatchVolume(ctx, pv, plan.Target, c.preResizeAnnotation(pv, pvc, nodeRequired)); err != nil {
		return err
	}
	if plan.Recovery {
		c.remember(key, func(m *claimMemory) { m.recovery = true })
	}
	done := resize.ExpandedStatus(pvc.Status, plan, plan.Target, nodeRequired, c.cfg.Legacy, c.now())
	if _, err := c.writeStatus(ctx, key, pvc, done, resize.ExpandedWrite(nodeRequired), true); err != nil {
		return err
	}
	c.expansionSucceeded(key, pvc, plan.Target, nodeRequired)
	return nil
}

// redriveNode puts a PVC whose node expansion failed back in the node's hands.
func (c *Controller) redriveNode(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, plan resize.Plan) error {
	st := resize.RedrivenStatus(pvc.Status, plan, c.now())
	if _, err := c.writeStatus(ctx, key, pvc, st, resize.WriteNodePending, true); err != nil {
		return err
	}
	c.markSlow(key)
	// The node has the expansion again: its outcome is recorded when the node finishes it.
	c.remember(key, func(m *claimMemory) {
		m.node = &nodeStep{from: pvc.Status.Capacity[v1.ResourceStorage].DeepCopy(), to: plan.Target.DeepCopy()}
	})
	c.cfg.Recorder.Eventf(pvc, v1.EventTypeWarning, EventFileSystemRequired,
		"the node failed to expand the volume, which already has %s in the control plane; asking the node to retry", plan.Target.String())
	return nil
}

// maxOutcomeConflicts bounds how often recordOutcome re-reads a PVC that keeps changing under
// it. Past it the answer is left unrecorded and the sync fails: the state the pre-call write
// left (ControllerResizeInProgress at the target) makes the retry repeat the idempotent call.
const maxOutcomeConflicts = 3

// recordOutcome writes the status that records the driver's answer, guarded by resourceVersion
// like every status write: the conditions list is written whole, and an unguarded write would
// drop a condition another component set during the call. The answer is known and must not
// cost a second driver call, so on a conflict (the PVC changed during the call: a new request,
// someone else's condition) the PVC is read again from the API, not from a cache that may be
// behind, and outcome is applied to what it holds now. Only a conflict costs that read.
func (c *Controller) recordOutcome(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, write resize.ClaimWrite, outcome func(v1.PersistentVolumeClaimStatus) v1.PersistentVolumeClaimStatus) (*v1.PersistentVolumeClaim, error) {
	for conflicts := 0; ; conflicts++ {
		out, err := c.writeStatus(ctx, key, pvc, outcome(pvc.Status), write, true)
		if err == nil || !apierrors.IsConflict(err) || conflicts == maxOutcomeConflicts {
			return out, err
		}
		klog.FromContext(ctx).V(2).Info("The PVC changed during the driver call; recording the answer over its latest version", "resourceVersion", pvc.ResourceVersion)
		latest, getErr := c.cfg.Client.CoreV1().PersistentVolumeClaims(pvc.Namespace).Get(ctx, pvc.Name, metav1.GetOptions{})
		if getErr != nil {
			return nil, errors.Join(err, fmt.Errorf("reading PVC %s/%s again: %w", pvc.Namespace, pvc.Name, getErr))
		}
		if latest.UID != pvc.UID {
			return nil, fmt.Errorf("PVC %s/%s was deleted and re-created during the driver call; its answer is not recorded on the new object", pvc.Namespace, pvc.Name)
		}
		pvc = latest
	}
}

// writeStatus patches the PVC status, with the node-expansion-not-required annotation that
// goes with this kind of write in the same patch, counts the state transition and remembers the
// written version so its update event is not processed again.
func (c *Controller) writeStatus(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, st v1.PersistentVolumeClaimStatus, write resize.ClaimWrite, guard bool) (*v1.PersistentVolumeClaim, error) {
	// The echo of this write can reach the update handler before the write returns its
	// resourceVersion: until then the handler holds the updates it sees (see claimUpdated).
	c.remember(key, func(m *claimMemory) { m.writing = true })
	out, err := c.cfg.Writer.PatchClaimStatus(ctx, pvc, st, resize.NodeExpansionNotRequired(pvc, write, c.cfg.Legacy), guard)
	requeue := false
	c.remember(key, func(m *claimMemory) {
		m.writing = false
		if err == nil && out != pvc {
			// A patch the apiserver found to change nothing keeps the version: the cache at
			// that version is current, not stale, so it is neither superseded nor a second,
			// newer own write.
			if out.ResourceVersion != pvc.ResourceVersion {
				m.ownVersions = appendBounded(m.ownVersions, out.ResourceVersion)
				m.superseded = appendBounded(m.superseded, pvc.ResourceVersion)
			}
		}
		for _, rv := range m.held {
			requeue = requeue || !slices.Contains(m.ownVersions, rv)
		}
		m.held = nil
	})
	if requeue {
		// Someone else changed the PVC while this write was under way.
		c.queue.Add(key)
	}
	if err != nil {
		return nil, err
	}
	if out != pvc {
		from := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]
		to := st.AllocatedResourceStatuses[v1.ResourceStorage]
		c.cfg.Metrics.Transition(from, to)
	}
	return out, nil
}

// expandRequest builds the driver call for pv. A migrated in-tree PV is translated first, so
// the volume handle, fsType and secret reference are those of its CSI view.
func (c *Controller) expandRequest(ctx context.Context, pv *v1.PersistentVolume, size resource.Quantity) (csi.ExpandRequest, error) {
	pv, migrated, err := migration.CSIView(klog.FromContext(ctx), pv)
	if err != nil {
		return csi.ExpandRequest{}, err
	}
	capability, err := csi.VolumeCapability(pv, c.cfg.Driver.SingleNodeMultiWriter)
	if err != nil {
		return csi.ExpandRequest{}, err
	}
	req := csi.ExpandRequest{VolumeID: pv.Spec.CSI.VolumeHandle, RequiredBytes: size.Value(), Capability: capability, Migrated: migrated}
	if ref := pv.Spec.CSI.ControllerExpandSecretRef; ref != nil {
		secret, err := c.cfg.Client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return req, fmt.Errorf("reading the controller-expand secret %s/%s of PV %s: %w", ref.Namespace, ref.Name, pv.Name, err)
		}
		req.Secrets = make(map[string]string, len(secret.Data))
		for k, v := range secret.Data {
			req.Secrets[k] = string(v)
		}
	}
	return req, nil
}

// preResizeAnnotation is the pre-resize-capacity annotation written with the PV's new capacity
// (AnnotateFsResize): pvc's status.capacity, when the node has a step and the PV has none yet.
func (c *Controller) preResizeAnnotation(pv *v1.PersistentVolume, pvc *v1.PersistentVolumeClaim, nodeRequired bool) map[string]*string {
	if !c.cfg.AnnotateFsResize {
		return nil
	}
	return resize.PreResizeCapacity(pv, pvc.Status.Capacity[v1.ResourceStorage], nodeRequired)
}

// preResizeCapacityToRemove reports whether the PV of pvc carries a pre-resize-capacity
// annotation whose node step is over, so the PVC must be synced to remove it.
func (c *Controller) preResizeCapacityToRemove(pvc *v1.PersistentVolumeClaim) bool {
	if !c.cfg.AnnotateFsResize || pvc.Spec.VolumeName == "" {
		return false
	}
	pv, err := c.pvLister.Get(pvc.Spec.VolumeName)
	return err == nil && migration.Owns(c.cfg.Driver.Name, pvc, pv) && resize.PreResizeCapacityDone(pvc, pv)
}

// removePreResizeCapacity removes the PV's pre-resize-capacity annotation once the node step
// it was written for is over (upstream's resizer does this; neither the kubelet nor
// kube-controller-manager does it for a CSI volume). It returns the PV as written.
func (c *Controller) removePreResizeCapacity(ctx context.Context, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) (*v1.PersistentVolume, error) {
	if !c.cfg.AnnotateFsResize || !resize.PreResizeCapacityDone(pvc, pv) {
		return pv, nil
	}
	klog.FromContext(ctx).V(4).Info("The node step is over: removing the pre-resize-capacity annotation", "annotation", pv.Annotations[resize.AnnPreResizeCapacity])
	return c.cfg.Writer.PatchVolume(ctx, pv, pv.Spec.Capacity[v1.ResourceStorage], resize.RemovePreResizeCapacity())
}

// startTime is when the expansion began: remembered, or after a restart the Resizing
// condition's transition time.
func (c *Controller) startTime(pvc *v1.PersistentVolumeClaim) time.Time {
	for _, cond := range pvc.Status.Conditions {
		if cond.Type == v1.PersistentVolumeClaimResizing && !cond.LastTransitionTime.IsZero() {
			return cond.LastTransitionTime.Time
		}
	}
	return c.cfg.Clock.Now()
}

// endEpisodeIfDone forgets the timing of an expansion that ended without this resizer
// recording its end: one it did not hand to the node itself (another resizer did, or this
// process restarted since), or a node step that ended without reaching its size. Nothing is
// observed for it: the start or the outcome is not known.
func (c *Controller) endEpisodeIfDone(key string, pvc *v1.PersistentVolumeClaim) {
	if pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage] != "" {
		return
	}
	if c.memory(key).node != nil {
		// Legacy mode writes no state: the node is still at work (observeNodeStep said so).
		return
	}
	c.remember(key, func(m *claimMemory) { m.since, m.failureObserved, m.recovery = time.Time{}, false, false })
	c.slow.Remove(key)
}

// nodeOutcome is what became of a node step, as the PVC tells.
type nodeOutcome int

const (
	nodePending nodeOutcome = iota
	nodeDone
	nodeFailed
	// nodeGone: the PVC left the node's hands without reaching the size: someone else
	// started another step. Neither success nor failure.
	nodeGone
)

// nodeStepOutcome reads a node step's outcome from the PVC. The kubelet ends a node expansion
// by clearing the resize state and setting status.capacity, in one write; it reports a failure
// it will not retry as NodeResizeInfeasible. In legacy mode there is no state and the
// FileSystemResizePending condition is what says the node still has work.
func nodeStepOutcome(obs resize.Observed, step *nodeStep) nodeOutcome {
	switch obs.State {
	case v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress:
		return nodePending
	case v1.PersistentVolumeClaimNodeResizeInfeasible:
		return nodeFailed
	case "":
		if obs.PVCCap.Cmp(step.to) >= 0 {
			return nodeDone
		}
		if obs.FileSystemResizePending {
			return nodePending
		}
	}
	return nodeGone
}

// observeNodeStep records the end of an expansion whose node step this resizer handed over:
// the duration and a recovery's success (with the VolumeResizeRecovered event) when the node
// finished, the failure when it became NodeResizeInfeasible. DESIGN §2.5 measures an expansion
// until it is done, and it is done only when the node has grown the file system.
func (c *Controller) observeNodeStep(ctx context.Context, key string, pvc *v1.PersistentVolumeClaim, obs resize.Observed) {
	m := c.memory(key)
	if m.node == nil {
		return
	}
	logger := klog.FromContext(ctx)
	switch nodeStepOutcome(obs, m.node) {
	case nodePending:
		return
	case nodeDone:
		took := c.elapsed(m.since)
		logger.V(2).Info("The node finished the expansion", "size", m.node.to.String(), "took", took, "recovery", m.recovery)
		if !m.since.IsZero() {
			c.cfg.Metrics.ExpansionDone(true, took)
		}
		if m.recovery {
			c.cfg.Metrics.Recovery(true)
			c.cfg.Recorder.Eventf(pvc, v1.EventTypeNormal, EventResizeRecovered,
				"recovered from a failed expansion: volume expanded from %s to %s in %s (file system included)", m.node.from.String(), m.node.to.String(), took)
		}
		c.remember(key, func(m *claimMemory) {
			m.since, m.failureObserved, m.recovery, m.node = time.Time{}, false, false, nil
		})
		c.slow.Remove(key)
	case nodeFailed:
		logger.V(2).Info("The node failed the expansion", "size", m.node.to.String(), "recovery", m.recovery)
		if !m.failureObserved && !m.since.IsZero() {
			c.cfg.Metrics.ExpansionDone(false, c.elapsed(m.since))
		}
		if m.recovery {
			c.cfg.Metrics.Recovery(false)
		}
		// The episode goes on (a redrive, a new request): a later success is still observed,
		// timed from the first sight of the expansion, as after a controller-side failure.
		c.remember(key, func(m *claimMemory) { m.failureObserved, m.recovery, m.node = true, false, nil })
	case nodeGone:
		logger.V(4).Info("The node step this resizer waited for was replaced by another step", "state", obs.State)
		c.remember(key, func(m *claimMemory) { m.node = nil })
	}
}

// awaitingNode reports whether the resizer waits to see the node finish an expansion of the
// PVC, so that the kubelet's final update, which leaves nothing to do, is still processed.
func (c *Controller) awaitingNode(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.claims[key]
	return ok && m.node != nil
}

// failedBefore reports whether the PVC records a failed expansion (infeasible) already.
func failedBefore(obs resize.Observed, legacy bool) bool {
	if legacy {
		return obs.LastError == resize.ClassInfeasible
	}
	return obs.State == v1.PersistentVolumeClaimControllerResizeInfeasible || obs.State == v1.PersistentVolumeClaimNodeResizeInfeasible
}

// elapsed is how long ago since was, or 0 when it is not known.
func (c *Controller) elapsed(since time.Time) time.Duration {
	if since.IsZero() {
		return 0
	}
	return c.cfg.Clock.Since(since).Round(time.Millisecond)
}

func (c *Controller) now() metav1.Time {
	return metav1.NewTime(c.cfg.Clock.Now().Truncate(time.Second))
}
