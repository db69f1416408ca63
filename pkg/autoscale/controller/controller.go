// Package controller is the doing half of volume-autoscaler (issue 33, docs/autoscaler.md): a
// poll loop reads the kubelets that run pods mounting an autoscaled PVC (package
// kubeletstats), keeps their volume stats, and queues those PVCs; sync(ctx, key) reads one PVC,
// its StorageClass and its siblings from the listers and the stats from the last round, asks
// the pure policy.Decide what to do, and does it in one guarded patch (the new request and the
// record annotation together, with the resourceVersion the decision was made on).
//
// It has the reconcile shape of every controller of this project (docs/design.md §5): event
// handlers only queue keys; the worker loop is pkg/internal/reconcile's; a sync does nothing on
// a cache older than this process's own last write (pkg/internal/freshness). The in-memory
// state is what the API cannot hold, and losing it costs a repeated event or one poll round,
// never a wrong decision:
//   - stats: the volume stats of the last poll round (the kubelet is the only source);
//   - told: the last event told per PVC, so that an unchanged skip or problem is not an event
//     per round (no event storms).
package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/kubeletstats"
	asmetrics "github.com/csi-resizer/csi-resizer/pkg/autoscale/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
	"github.com/csi-resizer/csi-resizer/pkg/internal/freshness"
	"github.com/csi-resizer/csi-resizer/pkg/internal/reconcile"
	"github.com/csi-resizer/csi-resizer/pkg/internal/tellonce"
)

// Name is the controller's name: event source component, work queue name and leader election
// Lease name.
const Name = "volume-autoscaler"

// Event reasons.
const (
	// EventAutoscaled: the request was raised (Normal), with the usage before, old and new size.
	EventAutoscaled = "VolumeAutoscaled"
	// EventRecovered: the request was lowered from a size the driver refused (Warning).
	EventRecovered = "VolumeAutoscaleRecovered"
	// EventDryRun: --dry-run; the resize that would have been made (Normal).
	EventDryRun = "VolumeAutoscaleDryRun"
	// EventSkipped: a resize is wanted but not made now (cooldown, resizing; Normal), told
	// when the reason changes.
	EventSkipped = "VolumeAutoscaleSkipped"
	// EventProblem: the PVC needs a person (bad annotation, at its limit while filling, a resize
	// that does not finish, an infeasible size; Warning).
	EventProblem = "VolumeAutoscaleProblem"
	// EventBadAnnotation: one bad annotation value, naming it and the PVC (Warning).
	EventBadAnnotation = "VolumeAutoscaleBadAnnotation"
	// EventQuota: the apiserver refused the resize for a ResourceQuota (Warning).
	EventQuota = "VolumeAutoscaleQuotaExceeded"
	// EventStatsUnavailable: the kubelet of the node that mounts the PVC could not be read
	// (Warning), with the error's hint.
	EventStatsUnavailable = "VolumeStatsUnavailable"
)

// podClaimIndex indexes pods by the "namespace/name" of each PVC they mount.
const podClaimIndex = "pvc"

// claimPrefixIndex indexes the PVCs the autoscaler grew (they carry its record) that are named
// like a StatefulSet replica's, "<prefix><ordinal>", by "namespace/<prefix>": a new replica's
// sync finds the siblings that can size it, not every replica by listing its namespace (10,000
// replicas made that a round's work longer than the round).
const claimPrefixIndex = "ordinal-prefix"

// Options tunes a Controller.
type Options struct {
	// Defaults are the policy's defaults (from the flags).
	Defaults policy.Defaults
	// Poller reads the kubelets; required.
	Poller kubeletstats.NodePoller
	// Interval is the time between two poll rounds (default 60s).
	Interval time.Duration
	// DryRun decides and reports but patches nothing.
	DryRun bool
	// Metrics: nil, a private unregistered set.
	Metrics *asmetrics.Metrics
	// RetryBaseDelay and RetryMaxDelay bound the backoff after a transient error (500ms, 5m).
	RetryBaseDelay, RetryMaxDelay time.Duration
}

// Controller autoscales PVCs.
type Controller struct {
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	recorder record.EventRecorder
	clock    clock.WithTicker
	metrics  *asmetrics.Metrics
	opts     Options

	pvcLister  corelisters.PersistentVolumeClaimLister
	podLister  corelisters.PodLister
	podIndex   cache.Indexer
	pvcIndex   cache.Indexer
	nodeLister corelisters.NodeLister
	scLister   storagelisters.StorageClassLister
	synced     []cache.InformerSynced

	// queue holds "namespace/name" keys of PVCs.
	queue workqueue.TypedRateLimitingInterface[string]
	// stats is the last poll round's usage per PVC (the kubelet is the only source of it).
	stats *statsCache
	// told dedups events per PVC (no event storms); fresh keeps syncs off a PVC version this
	// process's own patch replaced (design §5 rule 5).
	told  *tellonce.Memo
	fresh *freshness.Tracker
}

// New creates a controller and registers its informers on factory (call it before
// factory.Start). clk drives the poll ticker, the decisions' time and the queue's backoff.
func New(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory,
	recorder record.EventRecorder, clk clock.WithTicker, opts Options) (*Controller, error) {
	if opts.Poller == nil {
		return nil, fmt.Errorf("a kubelet stats poller is required")
	}
	if err := opts.Defaults.Validate(); err != nil {
		return nil, err
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Minute
	}
	if opts.Metrics == nil {
		opts.Metrics = asmetrics.New()
	}
	if opts.RetryBaseDelay <= 0 {
		opts.RetryBaseDelay = 500 * time.Millisecond
	}
	if opts.RetryMaxDelay <= 0 {
		opts.RetryMaxDelay = 5 * time.Minute
	}
	c := &Controller{
		client: client, factory: factory, recorder: recorder, clock: clk, metrics: opts.Metrics, opts: opts,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.RetryBaseDelay, opts.RetryMaxDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name, Clock: clk}),
		stats: newStatsCache(),
		told:  &tellonce.Memo{},
		fresh: freshness.New(),
	}
	return c, c.registerInformers(ctx)
}

// registerInformers sets the listers, transforms and handlers. Only PVCs, pods (for the PVCs
// of a new replica) and StorageClasses queue keys; nodes are only read.
func (c *Controller) registerInformers(ctx context.Context) error {
	pvcs, pods := c.factory.Core().V1().PersistentVolumeClaims(), c.factory.Core().V1().Pods()
	nodes, classes := c.factory.Core().V1().Nodes(), c.factory.Storage().V1().StorageClasses()
	c.pvcLister, c.podLister, c.nodeLister, c.scLister = pvcs.Lister(), pods.Lister(), nodes.Lister(), classes.Lister()
	c.podIndex, c.pvcIndex = pods.Informer().GetIndexer(), pvcs.Informer().GetIndexer()
	if err := pods.Informer().AddIndexers(cache.Indexers{podClaimIndex: podClaims}); err != nil {
		return fmt.Errorf("add the pod index (create the controller before starting the informer factory): %w", err)
	}
	if err := pvcs.Informer().AddIndexers(cache.Indexers{claimPrefixIndex: claimPrefix}); err != nil {
		return fmt.Errorf("add the PVC index (create the controller before starting the informer factory): %w", err)
	}
	for _, reg := range []struct {
		informer  cache.SharedIndexInformer
		transform cache.TransformFunc
		handler   cache.ResourceEventHandler
	}{
		{pvcs.Informer(), stripManagedFields, cache.ResourceEventHandlerFuncs{
			AddFunc: c.enqueue, UpdateFunc: func(_, obj any) { c.enqueue(obj) }, DeleteFunc: c.enqueue}},
		{pods.Informer(), transformPod, cache.ResourceEventHandlerFuncs{AddFunc: c.podAdded}},
		{nodes.Informer(), transformNode, nil},
		{classes.Informer(), stripManagedFields, cache.ResourceEventHandlerFuncs{
			AddFunc: c.classChanged, UpdateFunc: func(_, obj any) { c.classChanged(obj) }}},
	} {
		if err := reg.informer.SetTransform(reg.transform); err != nil {
			return fmt.Errorf("set informer transform (create the controller before starting the informer factory): %w", err)
		}
		if reg.handler == nil {
			c.synced = append(c.synced, reg.informer.HasSynced)
			continue
		}
		handle, err := reg.informer.AddEventHandlerWithOptions(reg.handler, cache.HandlerOptions{Logger: ptr.To(klog.FromContext(ctx))})
		if err != nil {
			return fmt.Errorf("add event handler: %w", err)
		}
		c.synced = append(c.synced, handle.HasSynced)
	}
	return nil
}

// Run starts the informers, the workers and the poll loop, and blocks until ctx ends and the
// workers have stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	if workers < 1 {
		return fmt.Errorf("workers must be positive, got %d", workers)
	}
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	logger.Info("Starting controller", "controller", Name, "workers", workers, "interval", c.opts.Interval, "dryRun", c.opts.DryRun)
	defer logger.Info("Stopped controller", "controller", Name)
	c.factory.Start(ctx.Done())
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return nil // only when ctx ended: a normal stop
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.pollLoop(ctx) })
	reconcile.RunWorkers(ctx, c.queue, workers, "pvc", c.syncKey)
	wg.Wait()
	return nil
}

// pollLoop polls at once, then every interval, until ctx ends.
func (c *Controller) pollLoop(ctx context.Context) {
	ticker := c.clock.NewTicker(c.opts.Interval)
	defer ticker.Stop()
	for {
		c.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// enqueue queues a PVC's key (add, update, delete: sync finds a deleted one gone).
func (c *Controller) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// podAdded queues the PVCs a new pod mounts: a new StatefulSet replica's PVC is created
// before its pod, and its siblings are found through the pod's owner (siblingSize).
func (c *Controller) podAdded(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok {
		for _, claim := range claimNames(pod) {
			c.queue.Add(pod.Namespace + "/" + claim)
		}
	}
}

// classChanged queues the PVCs of a StorageClass whose annotations may have changed.
func (c *Controller) classChanged(obj any) {
	sc, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	pvcs, err := c.pvcLister.List(labelsEverything)
	if err != nil {
		return
	}
	for _, pvc := range pvcs {
		if pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName == sc.GetName() {
			c.queue.Add(pvc.Namespace + "/" + pvc.Name)
		}
	}
}
