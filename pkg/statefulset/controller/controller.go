// Package controller is the doing half of statefulset-resizer: it watches
// StatefulSets, their Pods and PVCs, and StorageClasses, gathers the observed
// state of one StatefulSet from the informer caches, asks package plan what
// to do, and does it: one merge patch per PVC, Warning events on the
// StatefulSet, the status annotation (only when it changed) and metrics.
//
// It has the reconcile shape of every controller of this project (Kubernetes'
// sample-controller): event handlers only enqueue the StatefulSet's key;
// sync(ctx, key) reads the listers and the StatefulSet's own status
// annotation, calls the pure plan.Decide, and carries the decision out in
// writes guarded against a cache older than this process's last write.
//
// Every input comes from the API (no decision depends on memory a restart
// would lose). The in-memory state is what neither the API nor the work queue
// can hold, and losing it costs one repeated event or write, never a wrong
// decision:
//   - events: which events were already recorded, so that a stuck PVC does
//     not produce an event per sync;
//   - fresh: which cached versions this process's own writes replaced, so
//     that a sync running before the cache shows a write does not make it
//     again (package freshness).
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/pkg/internal/freshness"
	"github.com/csi-resizer/csi-resizer/pkg/internal/reconcile"
	"github.com/csi-resizer/csi-resizer/pkg/internal/tellonce"
	ssmetrics "github.com/csi-resizer/csi-resizer/pkg/statefulset/metrics"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/plan"
	"github.com/csi-resizer/csi-resizer/pkg/statefulset/recreate"
)

// Name is the controller's name: event source component, work queue name
// and leader election lease name.
const Name = "statefulset-resizer"

// Options tunes a Controller. The zero value is usable.
type Options struct {
	// Metrics receives the controller's metrics. Nil: a private,
	// unregistered set (nothing exported).
	Metrics *ssmetrics.Metrics
	// RetryBaseDelay and RetryMaxDelay bound the exponential backoff after a
	// transient error. Defaults: 500ms and 5m.
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// Recreate enables the re-create of an opted-in StatefulSet with the
	// templates of its desired-templates annotation (package recreate).
	// Re-creates already under way (a record exists) are finished even when
	// it is off: stopping half-way could leave no StatefulSet.
	Recreate bool
	// RecordNamespace is the namespace of the re-create records:
	// statefulset-resizer's own, where users who may write ConfigMaps in
	// their namespaces cannot forge one. Required.
	RecordNamespace string
}

// Controller reconciles StatefulSet volume claim templates with PVCs.
type Controller struct {
	client   kubernetes.Interface
	factory  informers.SharedInformerFactory
	recorder record.EventRecorder
	clock    clock.WithTicker
	metrics  *ssmetrics.Metrics

	stsLister appslisters.StatefulSetLister
	podLister corelisters.PodLister
	pvcLister corelisters.PersistentVolumeClaimLister
	scLister  storagelisters.StorageClassLister
	// nsLister holds the namespaces' labels: the namespace opt-in.
	nsLister corelisters.NamespaceLister
	// cmLister holds only the re-create records (label recreate.RecordLabel)
	// of recordNamespace, from recordFactory.
	cmLister        corelisters.ConfigMapLister
	recordFactory   informers.SharedInformerFactory
	recordNamespace string
	synced          []cache.InformerSynced
	recreate        bool

	// queue holds "namespace/name" keys of StatefulSets.
	queue workqueue.TypedRateLimitingInterface[string]

	// events dedups the Warning events (see recordEvents).
	events *eventCache
	// invalidDesire, invalidRecord and recreateHeldBack dedup the events
	// about an unusable desired-templates annotation, an unreadable re-create
	// record and a re-create held back.
	invalidDesire, invalidRecord, recreateHeldBack, recreateRefused tellonce.Memo
	// fresh holds the versions this process's PVC patches and status writes
	// replaced (keys from writeKey), until the cache shows the writes.
	fresh *freshness.Tracker
}

// New creates a controller. It registers its informers (with transforms that
// keep only what it reads) on factory, so it must be called before
// factory.Start. The clock drives the work queue's backoff and the reconcile
// duration metric; the recorder receives the Warning events.
func New(ctx context.Context, client kubernetes.Interface, factory informers.SharedInformerFactory,
	recorder record.EventRecorder, clk clock.WithTicker, opts Options) (*Controller, error) {
	opts = opts.withDefaults()
	if opts.RecordNamespace == "" {
		return nil, fmt.Errorf("the namespace of the re-create records is required (statefulset-resizer's own namespace)")
	}
	c := &Controller{
		client:   client,
		factory:  factory,
		recorder: recorder,
		clock:    clk,
		metrics:  opts.Metrics,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.RetryBaseDelay, opts.RetryMaxDelay),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: Name, Clock: clk}),
		events:          newEventCache(),
		fresh:           freshness.New(),
		recreate:        opts.Recreate,
		recordNamespace: opts.RecordNamespace,
		// Records are few and short-lived, and live only in
		// statefulset-resizer's own namespace: a separate factory lists and
		// watches only them there, with no right to any other ConfigMap.
		recordFactory: informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(opts.RecordNamespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = recreate.RecordLabel + "=true" })),
	}

	if err := c.registerInformers(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// registerInformers sets the listers, and the transforms and event handlers
// of the informers, on the factories.
func (c *Controller) registerInformers(ctx context.Context) error {
	stsInformer := c.factory.Apps().V1().StatefulSets()
	podInformer := c.factory.Core().V1().Pods()
	pvcInformer := c.factory.Core().V1().PersistentVolumeClaims()
	scInformer := c.factory.Storage().V1().StorageClasses()
	nsInformer := c.factory.Core().V1().Namespaces()
	c.stsLister, c.podLister = stsInformer.Lister(), podInformer.Lister()
	c.pvcLister, c.scLister, c.nsLister = pvcInformer.Lister(), scInformer.Lister(), nsInformer.Lister()
	cmInformer := c.recordFactory.Core().V1().ConfigMaps()
	c.cmLister = cmInformer.Lister()

	for _, reg := range []struct {
		informer  cache.SharedIndexInformer
		transform cache.TransformFunc
		handler   cache.ResourceEventHandler
	}{
		{stsInformer.Informer(), transformStatefulSet, cache.ResourceEventHandlerFuncs{
			AddFunc: c.enqueueStatefulSet, UpdateFunc: c.updateStatefulSet, DeleteFunc: c.enqueueStatefulSet}},
		{podInformer.Informer(), transformPod, cache.ResourceEventHandlerFuncs{
			AddFunc: c.podChanged, UpdateFunc: c.updatePod, DeleteFunc: c.podChanged}},
		{pvcInformer.Informer(), stripManagedFields, cache.ResourceEventHandlerFuncs{
			AddFunc: c.pvcChanged, UpdateFunc: c.updatePVC, DeleteFunc: c.pvcDeleted}},
		{scInformer.Informer(), stripManagedFields, cache.ResourceEventHandlerFuncs{
			AddFunc: c.storageClassChanged, UpdateFunc: c.updateStorageClass, DeleteFunc: c.storageClassChanged}},
		{nsInformer.Informer(), transformNamespace, cache.ResourceEventHandlerFuncs{UpdateFunc: c.updateNamespace}},
		{cmInformer.Informer(), stripManagedFields, cache.ResourceEventHandlerFuncs{
			AddFunc: c.recordChanged, UpdateFunc: func(_, obj any) { c.recordChanged(obj) }, DeleteFunc: c.recordChanged}},
	} {
		if err := reg.informer.SetTransform(reg.transform); err != nil {
			return fmt.Errorf("set informer transform (create the controller before starting the informer factory): %w", err)
		}
		handle, err := reg.informer.AddEventHandlerWithOptions(reg.handler, cache.HandlerOptions{Logger: ptr.To(klog.FromContext(ctx))})
		if err != nil {
			return fmt.Errorf("add event handler: %w", err)
		}
		c.synced = append(c.synced, handle.HasSynced)
	}
	return nil
}

// withDefaults fills the zero fields of o (see Options).
func (o Options) withDefaults() Options {
	if o.Metrics == nil {
		o.Metrics = ssmetrics.New()
	}
	if o.RetryBaseDelay <= 0 {
		o.RetryBaseDelay = 500 * time.Millisecond
	}
	if o.RetryMaxDelay <= 0 {
		o.RetryMaxDelay = 5 * time.Minute
	}
	return o
}

// Run starts the informers and workers and blocks until ctx is done and the
// workers have stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	if workers < 1 {
		return fmt.Errorf("workers must be positive, got %d", workers)
	}
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	if err := c.otherInstall(ctx); err != nil {
		return err
	}
	logger.Info("Starting controller", "controller", Name, "workers", workers)
	defer logger.Info("Stopped controller", "controller", Name)

	c.factory.Start(ctx.Done())
	c.recordFactory.Start(ctx.Done())
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return nil // only happens when ctx ended: a normal shutdown
	}
	reconcile.RunWorkers(ctx, c.queue, workers, "statefulset", c.syncKey)
	return nil
}

// syncKey is sync in the shared worker loop's terms: transient errors are retried with per-key
// exponential backoff; permanent ones are reported by sync and never returned, and nothing is
// re-examined on a timer (the StatefulSet's and its PVCs' events bring it back).
func (c *Controller) syncKey(ctx context.Context, key string) (time.Duration, error) {
	return 0, c.sync(ctx, key)
}

// sync reconciles one StatefulSet, given as "namespace/name": the worker's
// body. It returns only transient errors (the key is retried with backoff).
func (c *Controller) sync(ctx context.Context, key string) (err error) {
	start := c.clock.Now()
	defer func() { c.metrics.ObserveReconcile(c.clock.Since(start), err) }()

	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		// A malformed key can never succeed: drop it.
		utilruntime.HandleErrorWithContext(ctx, err, "Invalid work queue key", "key", key)
		return nil
	}
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "statefulset", klog.KRef(namespace, name))
	ctx = klog.NewContext(ctx, logger)
	sts, err := c.stsLister.StatefulSets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.metrics.ForgetStatefulSet(namespace, name)
		c.events.forget(key)
		c.invalidDesire.Forget(key)
		c.recreateHeldBack.Forget(key)
		c.recreateRefused.Forget(key)
		c.fresh.Forget(writeKey("sts", namespace, name))
		sts = nil
	} else if err != nil {
		return fmt.Errorf("get StatefulSet %s from cache: %w", key, err)
	}
	rec, err := c.record(ctx, namespace, name, sts)
	if err != nil {
		return err
	}
	if sts != nil && rec == nil {
		if other := recreate.OtherInstall(sts, c.recordNamespace); other != "" {
			// Invariant I6: one install acts on a StatefulSet at a time.
			klog.FromContext(ctx).V(2).Info("Leaving the StatefulSet to the statefulset-resizer install re-creating it", "install", other)
			return nil
		}
	}
	var wanted bool
	if sts != nil {
		templates, ready := c.recreateTemplates(sts)
		wanted = c.recreate && ready
		if rec == nil && sts.DeletionTimestamp == nil {
			c.tellRecreateHeldBack(sts, key, templates)
		}
	}
	if sts != nil && rec == nil && sts.DeletionTimestamp == nil && !wanted {
		// The volumes are reconciled with the live object; one about to be
		// replaced (a re-create starts or is under way) is left alone: its
		// status would go with it, and its PVCs are the new object's.
		if err := c.reconcile(ctx, sts, key); err != nil {
			return err
		}
	}
	return c.recreateSteps(ctx, namespace, name, sts, rec, wanted)
}

// tellRecreateHeldBack records a Normal event RecreateWaiting, once per
// reason, when a re-create is due but held back (recreate.Blocked): `wait`
// only says it waits for the re-create; the event says why.
func (c *Controller) tellRecreateHeldBack(sts *appsv1.StatefulSet, key string, templates []corev1.PersistentVolumeClaim) {
	blocked := recreate.Blocked(sts)
	if !c.recreate || blocked == "" || !recreate.Pending(true, sts, templates) || !c.optedIn(sts) {
		c.recreateHeldBack.Forget(key)
		return
	}
	if c.recreateHeldBack.First(key, blocked) {
		c.recorder.Eventf(sts, corev1.EventTypeNormal, EventRecreateWaiting,
			"The volume claim template change is recorded; the re-create waits: %s (the PVCs follow the change meanwhile)", blocked)
	}
}

// reconcile decides and carries out the PVC changes of one StatefulSet and
// writes its status.
func (c *Controller) reconcile(ctx context.Context, sts *appsv1.StatefulSet, key string) error {
	logger := klog.FromContext(ctx)
	in, err := c.gather(sts, key)
	if err != nil {
		return err
	}
	decision := plan.Decide(in)
	if decision.Deferred != "" {
		logger.V(4).Info("Not reconciling yet", "reason", decision.Deferred)
		return nil
	}
	logUnready(logger, sts, decision)
	return c.apply(ctx, sts, key, decision, recreate.Pending(c.recreate, sts, in.Templates))
}

// apply carries a decision out: the PVC patches, the events, the gauges and
// the status annotation, in that order (the status reports patches the
// apiserver rejected).
// recreatePending goes into the status (see status.VolumeClaimTemplates.Recreate).
func (c *Controller) apply(ctx context.Context, sts *appsv1.StatefulSet, key string, d *plan.Decision, recreatePending bool) error {
	transientErr := c.applyPatches(ctx, sts, d)
	c.recordEvents(sts, key, d)
	counts := map[string]ssmetrics.TemplateCounts{}
	for i := range d.Templates {
		n := d.Templates[i].Count()
		counts[d.Templates[i].Name] = ssmetrics.TemplateCounts{Pending: int(n.Pending), Infeasible: int(n.Failed)}
	}
	c.metrics.SetStatefulSet(sts.Namespace, sts.Name, counts)
	st := d.Status()
	st.Recreate = recreatePending
	st.RecreateStep = c.statusStep(sts, recreatePending)
	statusErr := c.writeStatus(ctx, sts, st)
	return errors.Join(transientErr, statusErr)
}

func logUnready(logger klog.Logger, sts *appsv1.StatefulSet, d *plan.Decision) {
	if !logger.V(4).Enabled() {
		return
	}
	for _, td := range d.Templates {
		for _, rd := range td.Replicas {
			if rd.State != plan.Ready {
				logger.V(4).Info("Replica not ready", "template", td.Name, "pvc", klog.KRef(sts.Namespace, rd.PVCName),
					"state", rd.State, "reason", rd.Reason, "message", rd.Message)
			}
		}
	}
}

// gather collects the decision's inputs from the informer caches.
func (c *Controller) gather(sts *appsv1.StatefulSet, key string) (plan.Input, error) {
	templates, value := c.desiredTemplates(sts, key)
	in := plan.Input{
		StatefulSet:    sts,
		Templates:      templates,
		Desired:        value,
		OptedIn:        c.optedIn(sts),
		Pods:           map[string]*corev1.Pod{},
		PVCs:           map[string]*corev1.PersistentVolumeClaim{},
		StorageClasses: map[string]*storagev1.StorageClass{},
	}
	start, replicas := ordinalRange(sts)
	for ordinal := start; ordinal < start+replicas; ordinal++ {
		podName := plan.PodName(sts.Name, ordinal)
		if pod, err := c.podLister.Pods(sts.Namespace).Get(podName); err == nil {
			in.Pods[podName] = pod
		} else if !apierrors.IsNotFound(err) {
			return in, fmt.Errorf("get pod %s/%s from cache: %w", sts.Namespace, podName, err)
		}
		for i := range sts.Spec.VolumeClaimTemplates {
			pvcName := plan.PVCName(sts.Spec.VolumeClaimTemplates[i].Name, sts.Name, ordinal)
			pvc, err := c.pvcLister.PersistentVolumeClaims(sts.Namespace).Get(pvcName)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return in, fmt.Errorf("get PVC %s/%s from cache: %w", sts.Namespace, pvcName, err)
			}
			in.PVCs[pvcName] = pvc
			if sc := pvc.Spec.StorageClassName; sc != nil && *sc != "" {
				if _, seen := in.StorageClasses[*sc]; !seen {
					if class, err := c.scLister.Get(*sc); err == nil {
						in.StorageClasses[*sc] = class
					}
				}
			}
		}
	}
	return in, nil
}

func ordinalRange(sts *appsv1.StatefulSet) (start, replicas int32) {
	if sts.Spec.Ordinals != nil {
		start = sts.Spec.Ordinals.Start
	}
	replicas = 1
	if sts.Spec.Replicas != nil {
		replicas = max(*sts.Spec.Replicas, 0)
	}
	return start, replicas
}
