// Package modifycontroller runs the sidecar's VolumeAttributesClass loop (KEP-3751): it watches
// the PVCs of one driver whose spec.volumeAttributesClassName differs from the class they have,
// asks pkg/modify what to do, and carries the plan out: status patches through pkg/status, the
// ControllerModifyVolume call through pkg/csi, events and metrics.
//
// It has the shape of the expansion controller (pkg/expandcontroller) and runs next to it in the same
// process, on the same informers and under the same Lease: handlers only queue keys, and
// sync(ctx, key) reads the PVC, its PV and the class from the listers and acts on what
// pkg/modify decides. Both controllers write the PVC's status, each only its own fields and
// conditions, in resourceVersion-guarded patches (docs/design.md §2.11 rule 19), and they share
// one freshness tracker, so neither decides on a version the other's write replaced.
package modifycontroller

import (
	"context"
	"errors"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	storageinformers "k8s.io/client-go/informers/storage/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
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
	"github.com/csi-resizer/csi-resizer/pkg/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/modify"
	"github.com/csi-resizer/csi-resizer/pkg/nodelocal"
	"github.com/csi-resizer/csi-resizer/pkg/status"
)

// Event reasons on the PVC; the first two are upstream's, so event filters keep working.
const (
	EventModifySuccessful = "VolumeModifySuccessful"
	EventModifyFailed     = "VolumeModifyFailed"
	EventModifyCancelled  = "VolumeModifyCancelled"
)

// Config is everything the controller needs from outside.
type Config struct {
	Driver   csi.Driver
	Modifier csi.Modifier
	// Client reads the modify secrets, and a PVC again when the write recording the driver's
	// answer conflicts; writes go through Writer.
	Client   kubernetes.Interface
	Writer   status.Writer
	Recorder record.EventRecorder
	Metrics  *metrics.Recorder
	Clock    clock.WithTicker
	// Fresh is shared with the expansion controller (see the package comment); nil: own.
	Fresh *freshness.Tracker

	RetryIntervalStart time.Duration
	RetryIntervalMax   time.Duration
	// ExtraModifyMetadata is --extra-modify-metadata: the PVC's and PV's names go into the
	// call's mutable parameters.
	ExtraModifyMetadata bool
	// CallTimeout is the deadline of a ControllerModifyVolume call (--modify-timeout): a
	// modification whose class was deleted is given up only once its latest call is past it
	// (rule 20).
	CallTimeout time.Duration
	// Leading is asked right before every driver call, as the expansion controller's
	// Config.Leading. nil: always.
	Leading func() error
	// Scope, with --node-deployment, limits the controller to its node's volumes, as the
	// expansion controller's Config.Scope (docs/design.md §2.12); nil: every volume.
	Scope *nodelocal.Scope
}

// Controller reconciles the VolumeAttributesClass of the PVCs of one driver.
type Controller struct {
	cfg         Config
	pvcLister   corelisters.PersistentVolumeClaimLister
	pvLister    corelisters.PersistentVolumeLister
	classLister storagelisters.VolumeAttributesClassLister
	synced      []cache.InformerSynced
	queue       workqueue.TypedRateLimitingInterface[string]
	obs         *metrics.ModifyObserver
}

// New wires the controller to its informers.
func New(cfg Config, pvcs coreinformers.PersistentVolumeClaimInformer, pvs coreinformers.PersistentVolumeInformer, classes storageinformers.VolumeAttributesClassInformer) *Controller {
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Fresh == nil {
		cfg.Fresh = freshness.New()
	}
	c := &Controller{
		cfg:         cfg,
		pvcLister:   pvcs.Lister(),
		pvLister:    pvs.Lister(),
		classLister: classes.Lister(),
		// API errors back off from --retry-interval-start to --retry-interval-max; driver errors
		// are retried on the PVC's own clock (modify.RetryWait).
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](cfg.RetryIntervalStart, cfg.RetryIntervalMax),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: cfg.Driver.Name + "-pvc-modify", Clock: cfg.Clock}),
		obs: metrics.NewModifyObserver(cfg.Metrics, cfg.Clock),
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
	classesReg, _ := classes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.classAdded,
		DeleteFunc: c.classDeleted,
	})
	c.synced = []cache.InformerSynced{claims.HasSynced, volumes.HasSynced, classesReg.HasSynced}
	if cfg.Scope != nil {
		node, _ := cfg.Scope.OnLabelsChanged(func() { c.requeue(func(modify.Observed) bool { return true }) })
		c.synced = append(c.synced, node.HasSynced)
	}
	return c
}

// Run processes PVCs with the given number of workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if !cache.WaitForNamedCacheSync("csi-resizer-modify", ctx.Done(), c.synced...) {
		return errors.New("informer caches did not sync")
	}
	klog.FromContext(ctx).Info("Starting VolumeAttributesClass workers", "driver", c.cfg.Driver.Name, "workers", workers)
	reconcile.RunWorkers(ctx, c.queue, workers, "pvc", c.sync)
	return nil
}

// sync reconciles one PVC: an error retries with backoff, a delay looks again after it.
func (c *Controller) sync(ctx context.Context, key string) (time.Duration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return 0, nil
	}
	pvc, err := c.pvcLister.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.cfg.Fresh.Forget(key)
		c.obs.Forget(key)
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if ok, err := c.cfg.Fresh.Decidable(holdModification, key, pvc.ResourceVersion, requestedClass(pvc), c.cfg.Clock.Now()); !ok {
		return 0, err // behind this process's own write, or held (freshness.Tracker.Decidable)
	}
	pv, ok := binding.VolumeOf(c.pvLister, c.cfg.Driver.Name, pvc)
	o := modify.Observe(pvc)
	if !ok || !o.Wants() {
		c.obs.Forget(key) // a modification that ended without this process seeing how
		return 0, nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "pvc", klog.KObj(pvc), "pv", klog.KObj(pv))
	ctx = klog.NewContext(ctx, logger)
	if !c.cfg.Scope.Handles(logger, pv) {
		return 0, nil // another node's volume, or no node instance's (--node-deployment)
	}
	plan := modify.Decide(o, c.class, c.cfg.Driver.Name)
	logger.V(4).Info("Planned modification", "action", plan.Action, "target", plan.Target, "why", plan.Why)
	switch plan.Action {
	case modify.GiveUp:
		return c.giveUp(ctx, key, pvc, plan)
	case modify.MarkPending:
		return 0, c.markPending(ctx, key, pvc, o, plan)
	case modify.MarkInfeasible:
		return 0, c.markOtherDriver(ctx, key, pvc, o, plan)
	case modify.Cancel:
		return 0, c.cancel(ctx, key, pvc, o)
	case modify.Modify:
		retry := expand.Retry{Start: c.cfg.RetryIntervalStart, Max: c.cfg.RetryIntervalMax}
		if wait := modify.RetryWait(pvc, o, plan, retry, c.cfg.Clock.Now()); wait > 0 {
			logger.V(4).Info("The last attempt failed: waiting for the retry or another class", "wait", wait)
			return wait, nil
		}
		return c.modify(ctx, key, pvc, pv, plan)
	}
	return 0, nil
}

// class is the lister as a modify.ClassLookup.
func (c *Controller) class(name string) *storagev1.VolumeAttributesClass {
	vac, err := c.classLister.Get(name)
	if err != nil {
		return nil
	}
	return vac
}

func (c *Controller) now() metav1.Time {
	return metav1.NewTime(c.cfg.Clock.Now().Truncate(time.Second))
}
