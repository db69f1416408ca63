package controller

import (
	"context"
	"errors"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/kubeletstats"
	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
)

// volumeState is what the last poll round knows of one PVC: its usage, or why it is unknown.
type volumeState struct {
	// stats is the kubelet's report; nil when the node did not report the volume.
	stats *policy.VolumeStats
	// node is the node whose kubelet was read for it; err is that read's error.
	node string
	err  error
}

// statsCache holds the last complete poll round; a round replaces it whole, so a PVC no longer
// mounted anywhere has no stats (never the numbers of a round ago).
type statsCache struct {
	mu      sync.RWMutex
	volumes map[string]volumeState
}

func newStatsCache() *statsCache { return &statsCache{volumes: map[string]volumeState{}} }

func (s *statsCache) get(key string) (volumeState, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.volumes[key]
	return v, ok
}

func (s *statsCache) replace(volumes map[string]volumeState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.volumes = volumes
}

// Poll runs one round: it reads the kubelets of the nodes that run pods mounting an autoscaled
// PVC, replaces the stats cache with what they reported (or why they could not), and queues
// those PVCs. A round cut short by ctx changes nothing.
func (c *Controller) Poll(ctx context.Context) {
	start := c.clock.Now()
	logger := klog.FromContext(ctx)
	byNode := c.mountedAutoscaled()
	names := make([]string, 0, len(byNode))
	for name := range byNode {
		names = append(names, name)
	}
	sort.Strings(names)
	nodes, missing := c.nodes(names)
	results := c.opts.Poller.Poll(ctx, nodes)
	results = append(results, missing...)
	if ctx.Err() != nil {
		return
	}
	volumes := map[string]volumeState{}
	read := map[string]bool{}
	for _, r := range results {
		read[r.Node] = true
		c.metrics.NodeRead(r.Node, r.Duration, string(kubeletstats.ReasonOf(r.Err)))
		if r.Err != nil {
			logger.Error(r.Err, "Reading volume stats failed", "node", r.Node, "pvcs", len(byNode[r.Node]))
		}
		for _, key := range byNode[r.Node] {
			volumes[key] = stateOf(key, r, volumes[key])
		}
	}
	c.metrics.KeepNodes(read)
	c.stats.replace(volumes)
	c.metrics.ObservePoll(c.clock.Since(start))
	logger.V(4).Info("Poll round done", "nodes", len(results), "pvcs", len(volumes), "duration", c.clock.Since(start))
	for key := range volumes {
		c.queue.Add(key)
	}
}

// stateOf is the PVC's state from one node's result; a PVC mounted on two nodes (RWX) keeps the
// report of the node that had one.
func stateOf(key string, r kubeletstats.NodeResult, prev volumeState) volumeState {
	if prev.stats != nil {
		return prev
	}
	if r.Err != nil {
		return volumeState{node: r.Node, err: r.Err}
	}
	st, ok := r.Volumes[key]
	if !ok {
		// Mounted, but the kubelet has not measured it yet: unknown, not an error.
		return volumeState{node: r.Node}
	}
	return volumeState{node: r.Node, stats: &policy.VolumeStats{
		CapacityBytes: clampInt(st.CapacityBytes), AvailableBytes: clampInt(st.AvailableBytes), UsedBytes: clampInt(st.UsedBytes),
		Inodes: clampInt(st.Inodes), InodesFree: clampInt(st.InodesFree), InodesUsed: clampInt(st.InodesUsed), Time: st.Time,
	}}
}

func clampInt(u uint64) int64 { return int64(min(u, 1<<63-1)) }

// mountedAutoscaled maps each node to the autoscaled PVCs its pods mount.
func (c *Controller) mountedAutoscaled() map[string][]string {
	pods, err := c.podLister.List(labelsEverything)
	if err != nil {
		return nil
	}
	autoscaled := map[string]bool{}
	byNode := map[string][]string{}
	seen := map[string]bool{}
	for _, pod := range pods {
		if !mounting(pod) {
			continue
		}
		for _, claim := range claimNames(pod) {
			key := pod.Namespace + "/" + claim
			ok, known := autoscaled[key]
			if !known {
				ok = c.autoscaled(pod.Namespace, claim)
				autoscaled[key] = ok
			}
			if ok && !seen[pod.Spec.NodeName+"\x00"+key] {
				seen[pod.Spec.NodeName+"\x00"+key] = true
				byNode[pod.Spec.NodeName] = append(byNode[pod.Spec.NodeName], key)
			}
		}
	}
	return byNode
}

// autoscaled reports whether a PVC is autoscaled with good settings: only those need stats.
// A PVC with a bad annotation is told by its sync (its own events), not polled.
func (c *Controller) autoscaled(namespace, name string) bool {
	pvc, err := c.pvcLister.PersistentVolumeClaims(namespace).Get(name)
	if err != nil {
		return false
	}
	s, ok := policy.Parse(c.class(pvc), pvc, c.opts.Defaults)
	return ok && s.Enabled
}

// class returns the PVC's StorageClass from the cache, nil when it has none or it is gone.
func (c *Controller) class(pvc *corev1.PersistentVolumeClaim) *storagev1.StorageClass {
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return nil
	}
	sc, err := c.scLister.Get(*pvc.Spec.StorageClassName)
	if err != nil {
		return nil
	}
	return sc
}

// nodes returns the Node objects of names; a name without a Node in the cache is a failed
// read, reported like any other.
func (c *Controller) nodes(names []string) ([]*corev1.Node, []kubeletstats.NodeResult) {
	var nodes []*corev1.Node
	var missing []kubeletstats.NodeResult
	for _, name := range names {
		node, err := c.nodeLister.Get(name)
		if err == nil {
			nodes = append(nodes, node)
			continue
		}
		missing = append(missing, kubeletstats.NodeResult{Node: name, Err: &kubeletstats.Error{
			Node: name, Reason: kubeletstats.ReasonNoEndpoint, Err: errors.New("the Node object does not exist"),
			Hint: "pods are bound to a node the API does not know; check `kubectl get node " + name + "`"}})
	}
	return nodes, missing
}
