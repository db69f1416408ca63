// Package controller runs the sidecar's reconcile loop: it watches the PVCs and PVs of one CSI
// driver, asks pkg/expand what to do with each PVC, and carries the plan out: status patches
// through pkg/status, the driver call through pkg/csi, events and metrics.
//
// It has the shape of Kubernetes' sample-controller: the event handlers only put keys in the
// work queue, and sync(ctx, key) reads the PVC and its PV from the listers and acts on what
// pkg/expand decides from them. The controller decides nothing itself: sizes, states, retry
// times, node-step outcomes and the wait for pods are pure functions of the PVC in pkg/expand,
// so a restarted resizer, or this one woken by the echo of its own write, decides the same.
// What it keeps in memory is in legacyFailed (handlers.go); the metrics' bookkeeping is
// pkg/metrics.Observer's.
package expandcontroller

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/csi-resizer/csi-resizer/pkg/csi"
	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/internal/binding"
	"github.com/csi-resizer/csi-resizer/pkg/internal/freshness"
	"github.com/csi-resizer/csi-resizer/pkg/internal/reconcile"
	"github.com/csi-resizer/csi-resizer/pkg/inuse"
	"github.com/csi-resizer/csi-resizer/pkg/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/nodelocal"
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
	// HandleVolumeInUse enables the in-use check for offline expansion
	// (docs/design.md §2.3 rule 9).
	HandleVolumeInUse bool
	// Legacy is RecoverVolumeExpansionFailure=false.
	Legacy bool
	// AnnotateFsResize writes the pre-resize-capacity annotation on the PV, and removes it
	// when the node step is over (docs/design.md §2.9).
	AnnotateFsResize bool
	// Fresh is shared with the modification controller, which writes the same PVCs
	// (docs/design.md §2.11 rule 19); nil: the controller's own.
	Fresh *freshness.Tracker
	// Leading, with --leader-election, says whether this process may still act as the leader
	// (leaseguard.Guard.Check); it is asked right before every driver call. nil: always.
	Leading func() error
	// Scope, with --node-deployment, limits the controller to the volumes local to its node
	// (docs/design.md §2.12); nil: every volume of the driver.
	Scope *nodelocal.Scope
}

// Controller reconciles the PVCs of one driver.
type Controller struct {
	cfg       Config
	pvcLister corelisters.PersistentVolumeClaimLister
	pvLister  corelisters.PersistentVolumeLister
	synced    []cache.InformerSynced
	queue     workqueue.TypedRateLimitingInterface[string]
	pods      *inuse.Tracker
	// fresh: do not decide on a cached PVC older than this process's last write to it.
	fresh *freshness.Tracker
	obs   *metrics.Observer

	mu sync.Mutex
	// failed: see legacyFailed (handlers.go).
	failed map[string]resource.Quantity
}

// New wires the controller to its informers.
func New(cfg Config, pvcs coreinformers.PersistentVolumeClaimInformer, pvs coreinformers.PersistentVolumeInformer) *Controller {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Fresh == nil {
		cfg.Fresh = freshness.New()
	}
	c := &Controller{
		cfg:       cfg,
		pvcLister: pvcs.Lister(),
		pvLister:  pvs.Lister(),
		// The API-error backoff: from --retry-interval-start, doubling up to
		// --retry-interval-max. Driver errors are retried on the PVC's own clock instead
		// (expand.RetryWait). The name is upstream's, so workqueue_* series match.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.RetryIntervalStart, cfg.RetryIntervalMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: cfg.Driver.Name + "-pvc", Clock: cfg.Clock}),
		fresh:  cfg.Fresh,
		obs:    metrics.NewObserver(cfg.Metrics, cfg.Clock),
		failed: map[string]resource.Quantity{},
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
	// have seen the whole initial list.
	c.synced = []cache.InformerSynced{claims.HasSynced, volumes.HasSynced}
	if cfg.Scope != nil {
		node, _ := cfg.Scope.OnLabelsChanged(c.requeueAll)
		c.synced = append(c.synced, node.HasSynced)
	}
	return c
}

// Run processes PVCs with the given number of workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	c.pods = inuse.New(ctx, c.cfg.Client, c.cfg.Scope.NodeName(), func(keys []string) {
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
	klog.FromContext(ctx).Info("Starting workers", "driver", c.cfg.Driver.Name, "workers", workers)
	reconcile.RunWorkers(ctx, c.queue, workers, "pvc", c.sync)
	return nil
}

// sync reconciles one PVC. It returns an error for a retry with backoff, or a delay after which
// the PVC must be looked at again (the retry of a failed expansion).
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	if pvName, ok := strings.CutPrefix(key, volumeKeyPrefix); ok {
		return 0, c.syncClaimlessVolume(ctx, pvName)
	}
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
	if ok, err := c.fresh.Decidable(holdExpansion, key, pvc.ResourceVersion, requestedSize(pvc), c.cfg.Clock.Now()); !ok {
		// Behind (nil error): deciding on a version this process's own write replaced would
		// repeat the step that write recorded; the write's echo queues the PVC again.
		klog.FromContext(ctx).V(4).Info("Not deciding on this version of the PVC", "pvc", key, "resourceVersion", pvc.ResourceVersion, "err", err)
		return 0, err
	}
	pv, ok := c.volumeOf(pvc)
	if !ok {
		return 0, nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(pvc), "pv", klog.KObj(pv))
	ctx = klog.NewContext(ctx, logger)
	if !c.cfg.Scope.Handles(logger, pv) {
		return 0, nil // another node's volume, or no node instance's (--node-deployment)
	}
	if pv, err = c.removePreResizeCapacity(ctx, pvc, pv); err != nil {
		return 0, err
	}
	obs := expand.Observe(pvc, pv, c.cfg.Driver.NodeOnly(), c.cfg.Legacy)
	if r := c.obs.NodeProgress(ctx, key, pvc, obs); r != nil {
		c.cfg.Recorder.Eventf(pvc, v1.EventTypeNormal, EventResizeRecovered,
			"recovered from a failed expansion: volume expanded from %s to %s in %s (file system included)", r.From.String(), r.To.String(), r.Took)
	}
	plan := expand.PlanExpansion(obs)
	logger.V(4).Info("Planned", "action", plan.Action, "target", plan.Target.String(), "recovery", plan.Recovery, "why", plan.Why)
	if plan.Action == expand.Nothing {
		c.obs.Idle(key, obs)
		return 0, nil
	}
	if wait := c.retryWait(key, pvc, obs, plan); wait > 0 {
		logger.V(4).Info("The last attempt failed: waiting for the retry or a new request", "wait", wait)
		return wait, nil
	}
	c.obs.Begin(key, pvc, obs)
	switch plan.Action {
	case expand.RedriveNode:
		return 0, c.redriveNode(ctx, key, pvc, plan)
	case expand.ExpandNodeOnly:
		return 0, c.expandNodeOnly(ctx, key, pvc, pv, obs, plan)
	case expand.RecordExpanded:
		return 0, c.recordExpanded(ctx, key, pvc, plan)
	default:
		return c.expandController(ctx, key, pvc, pv, plan)
	}
}

// retryWait is expand.RetryWait with this controller's policy and, in legacy mode, the failed
// request it remembers.
func (c *Controller) retryWait(key string, pvc *v1.PersistentVolumeClaim, obs expand.Observed, plan expand.Plan) time.Duration {
	retry := expand.Retry{Start: c.cfg.RetryIntervalStart, Max: c.cfg.RetryIntervalMax}
	return expand.RetryWait(pvc, obs, plan, c.legacyFailed(key), retry, c.cfg.Clock.Now())
}

// volumeOf is binding.VolumeOf for this controller's driver.
func (c *Controller) volumeOf(pvc *v1.PersistentVolumeClaim) (*v1.PersistentVolume, bool) {
	return binding.VolumeOf(c.pvLister, c.cfg.Driver.Name, pvc)
}

// preResizeAnnotation is the pre-resize-capacity change written with the PV's new capacity
// (AnnotateFsResize, docs/design.md §2.9).
func (c *Controller) preResizeAnnotation(pv *v1.PersistentVolume, pvc *v1.PersistentVolumeClaim, nodeRequired bool) map[string]*string {
	if !c.cfg.AnnotateFsResize {
		return nil
	}
	return expand.PreResizeCapacity(pv, pvc.Status.Capacity[v1.ResourceStorage], nodeRequired)
}

// removePreResizeCapacity removes the PV's pre-resize-capacity annotation once the node step
// it was written for is over, before any decision, as upstream's resizer does (neither the
// kubelet nor kube-controller-manager removes it for a CSI volume). It returns the PV as
// written.
func (c *Controller) removePreResizeCapacity(ctx context.Context, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) (*v1.PersistentVolume, error) {
	if !c.cfg.AnnotateFsResize || !expand.PreResizeCapacityDone(pvc, pv) {
		return pv, nil
	}
	klog.FromContext(ctx).V(4).Info("The node step is over: removing the pre-resize-capacity annotation", "annotation", pv.Annotations[expand.AnnPreResizeCapacity])
	return c.cfg.Writer.PatchVolume(ctx, pv, pv.Spec.Capacity[v1.ResourceStorage], expand.RemovePreResizeCapacity())
}

// syncClaimlessVolume removes the pre-resize-capacity annotation of a PV whose claim was
// deleted after its node step (claimDeleted queued it). It checks again what the API shows:
// the annotation is still there, the claim is still gone (a claim of the PV that exists is
// its own sync's to decide), and the PV is this driver's and, with --node-deployment, this
// node's.
func (c *Controller) syncClaimlessVolume(ctx context.Context, name string) error {
	pv, err := c.pvLister.Get(name)
	if err != nil || !c.cfg.AnnotateFsResize || pv.Annotations[expand.AnnPreResizeCapacity] == "" {
		return nil
	}
	if ref := pv.Spec.ClaimRef; ref != nil {
		if pvc, err := c.pvcLister.PersistentVolumeClaims(ref.Namespace).Get(ref.Name); err == nil && pvc.UID == ref.UID {
			return nil
		}
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pv", klog.KObj(pv))
	if !binding.MayBeDrivers(pv, c.cfg.Driver.Name) || !c.cfg.Scope.Handles(logger, pv) {
		return nil
	}
	logger.V(2).Info("The PV's claim was deleted after its node step: removing the pre-resize-capacity annotation", "annotation", pv.Annotations[expand.AnnPreResizeCapacity])
	_, err = c.cfg.Writer.PatchVolume(klog.NewContext(ctx, logger), pv, pv.Spec.Capacity[v1.ResourceStorage], expand.RemovePreResizeCapacity())
	return err
}

func (c *Controller) now() metav1.Time {
	return metav1.NewTime(c.cfg.Clock.Now().Truncate(time.Second))
}
