package kubeletstats

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/utils/clock"
)

// SummaryReader reads one kubelet's summary; *Client is the real one.
type SummaryReader interface {
	Summary(ctx context.Context, node *v1.Node) (*statsv1alpha1.Summary, error)
}

// NodePoller is what the controller uses: read these nodes, tell me each one's volumes or error.
type NodePoller interface {
	Poll(ctx context.Context, nodes []*v1.Node) []NodeResult
}

// NodeResult is the outcome of reading one node. Exactly one of Volumes and Err is set.
type NodeResult struct {
	Node string
	// Volumes is the usage per PVC ("namespace/name") the kubelet reported; it may be empty.
	Volumes map[string]VolumeStats
	// Err is an *Error when the node could not be read; its PVCs' usage is then unknown, never
	// assumed.
	Err error
	// Duration is how long the read took (the latency metric); 0 when it was not attempted.
	Duration time.Duration
}

// Poller reads many kubelets with at most a fixed number of requests in flight: each request
// costs the kubelet a little work, and a cluster of a thousand nodes must not be hit at once.
type Poller struct {
	reader      SummaryReader
	concurrency int
	clock       clock.PassiveClock
}

var _ NodePoller = (*Poller)(nil)

// NewPoller reads with reader, at most concurrency nodes at a time (at least 1). clk measures
// durations; nil means the real clock.
func NewPoller(reader SummaryReader, concurrency int, clk clock.PassiveClock) *Poller {
	if concurrency < 1 {
		concurrency = 1
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Poller{reader: reader, concurrency: concurrency, clock: clk}
}

// Poll reads every node once and returns one result per distinct node name, in the order
// given. Each read has the reader's own timeout; when ctx ends, the nodes not read yet get a
// ReasonCanceled error instead of a read.
func (p *Poller) Poll(ctx context.Context, nodes []*v1.Node) []NodeResult {
	nodes = distinct(nodes)
	results := make([]NodeResult, len(nodes))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(p.concurrency, len(nodes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				results[i] = p.read(ctx, nodes[i])
			}
		}()
	}
	for i := range nodes {
		work <- i
	}
	close(work)
	wg.Wait()
	return results
}

func (p *Poller) read(ctx context.Context, node *v1.Node) NodeResult {
	if err := ctx.Err(); err != nil {
		return NodeResult{Node: node.Name, Err: &Error{Node: node.Name, Reason: ReasonCanceled, Err: err}}
	}
	start := p.clock.Now()
	summary, err := p.reader.Summary(ctx, node)
	took := p.clock.Since(start)
	if err != nil {
		return NodeResult{Node: node.Name, Err: err, Duration: took}
	}
	return NodeResult{Node: node.Name, Volumes: Volumes(summary), Duration: took}
}

// distinct drops nil nodes and repeated names, keeping the first.
func distinct(nodes []*v1.Node) []*v1.Node {
	seen := make(map[string]bool, len(nodes))
	out := make([]*v1.Node, 0, len(nodes))
	for _, n := range nodes {
		if n == nil || seen[n.Name] {
			continue
		}
		seen[n.Name] = true
		out = append(out, n)
	}
	return out
}
