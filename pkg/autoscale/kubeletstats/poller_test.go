package kubeletstats

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// gate counts the requests in flight across many kubelet servers. A request is held until the
// bound is reached and then for a grace window more, so that a poller passing its bound would
// be seen doing it (more requests arrive while these are held); it is let go at once when
// every node has been asked or the bound is passed. A correct poller is never failed by the
// window, only slowed; a wrong one is caught unless its extra requests take longer than the
// window to arrive.
type gate struct {
	mu                sync.Mutex
	bound, total      int
	grace             time.Duration
	inflight, started int
	maxInflight       int
	perNode           map[string]int
	changed           chan struct{} // closed and replaced on every change
	body              []byte
}

func (g *gate) changedLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}

func (g *gate) handler(node string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.inflight++
		g.started++
		g.perNode[node]++
		g.maxInflight = max(g.maxInflight, g.inflight)
		g.changedLocked()
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.inflight--
			g.changedLocked()
			g.mu.Unlock()
		}()
		if !g.hold(r.Context()) {
			return
		}
		// Each stand-in answers as its own node, as a kubelet does.
		summaryHandler(bytes.Replace(g.body, []byte(`"nodeName": "node-a"`), []byte(`"nodeName": "`+node+`"`), 1))(w, r)
	}
}

// hold waits as the gate's comment says; false when the request was abandoned.
func (g *gate) hold(ctx context.Context) bool {
	var grace <-chan time.Time
	for {
		g.mu.Lock()
		full, release := g.inflight == g.bound, g.inflight > g.bound || g.started >= g.total
		ch := g.changed
		g.mu.Unlock()
		if release {
			return true
		}
		if !full {
			grace = nil
		} else if grace == nil {
			grace = time.After(g.grace)
		}
		select {
		case <-ch:
		case <-grace:
			return true
		case <-ctx.Done():
			return false
		}
	}
}

func TestPollerBoundedConcurrency(t *testing.T) {
	const nodes, bound = 10, 3
	ca := newTestCA(t, "kubelet-ca")
	cert := localCert(t, ca)
	g := &gate{bound: bound, total: nodes, grace: 200 * time.Millisecond, perNode: map[string]int{}, changed: make(chan struct{}), body: fixture(t)}
	var list []*v1.Node
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		list = append(list, testNode(name, kubeletServer(t, cert, g.handler(name))))
	}
	c := newTestClient(t, Options{CAFile: ca.file, Timeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a stuck poller fails, not hangs
	defer cancel()

	results := NewPoller(c, bound, nil).Poll(ctx, list)

	g.mu.Lock()
	defer g.mu.Unlock()
	if g.maxInflight != bound {
		t.Errorf("at most %d requests were in flight, want exactly the bound %d", g.maxInflight, bound)
	}
	if len(results) != nodes {
		t.Fatalf("%d results, want %d", len(results), nodes)
	}
	for i, r := range results {
		if r.Node != list[i].Name || r.Err != nil || len(r.Volumes) != len(fixtureVolumes) || r.Duration <= 0 {
			t.Errorf("result %d: node %s, err %v, %d volumes, took %s; want node %s, %d volumes, a duration",
				i, r.Node, r.Err, len(r.Volumes), r.Duration, list[i].Name, len(fixtureVolumes))
		}
		if g.perNode[list[i].Name] != 1 {
			t.Errorf("the kubelet of %s got %d requests, want 1", list[i].Name, g.perNode[list[i].Name])
		}
	}
}

// fakeReader answers from a table and moves a fake clock, so durations are exact.
type fakeReader struct {
	clock *clocktesting.FakePassiveClock
	took  map[string]time.Duration
	errs  map[string]error
	mu    sync.Mutex
	calls []string
}

func (f *fakeReader) Summary(_ context.Context, node *v1.Node) (*statsv1alpha1.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, node.Name)
	f.clock.SetTime(f.clock.Now().Add(f.took[node.Name]))
	if err := f.errs[node.Name]; err != nil {
		return nil, err
	}
	used := uint64(len(node.Name))
	return &statsv1alpha1.Summary{Pods: []statsv1alpha1.PodStats{{
		PodRef: statsv1alpha1.PodReference{Namespace: "ns", Name: "pod-on-" + node.Name},
		VolumeStats: []statsv1alpha1.VolumeStats{{Name: "data", PVCRef: &statsv1alpha1.PVCReference{Namespace: "ns", Name: "claim-" + node.Name},
			FsStats: statsv1alpha1.FsStats{CapacityBytes: ptr.To[uint64](100), AvailableBytes: ptr.To(100 - used), UsedBytes: &used}}},
	}}}, nil
}

func TestPollerResults(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC))
	refused := &Error{Node: "b", Reason: ReasonRefused, Err: errors.New("connection refused")}
	reader := &fakeReader{clock: clk, took: map[string]time.Duration{"a": 2 * time.Second, "b": 3 * time.Second, "c": 0},
		errs: map[string]error{"b": refused}}
	// Serial (bound 1), so the fake clock's steps belong to one read each.
	results := NewPoller(reader, 1, clk).Poll(context.Background(),
		[]*v1.Node{testNode("a", 1), nil, testNode("b", 1), testNode("a", 1), testNode("c", 1)})

	if len(results) != 3 || len(reader.calls) != 3 {
		t.Fatalf("%d results from %d reads (%v), want 3 and 3: nil and repeated nodes are dropped", len(results), len(reader.calls), reader.calls)
	}
	a, b, c := results[0], results[1], results[2]
	if a.Node != "a" || a.Err != nil || a.Duration != 2*time.Second || a.Volumes["ns/claim-a"].Pod != "ns/pod-on-a" {
		t.Errorf("a: %+v", a)
	}
	if b.Node != "b" || !errors.Is(b.Err, refused) || b.Volumes != nil || b.Duration != 3*time.Second {
		t.Errorf("b: %+v; want the reader's error and its duration, no volumes", b)
	}
	if c.Node != "c" || c.Err != nil || len(c.Volumes) != 1 {
		t.Errorf("c: %+v", c)
	}
}

func TestPollerCanceled(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	reader := &fakeReader{clock: clk}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	results := NewPoller(reader, 0, clk).Poll(ctx, []*v1.Node{testNode("a", 1), testNode("b", 1)})
	if len(reader.calls) != 0 {
		t.Fatalf("read %v after the context ended", reader.calls)
	}
	for _, r := range results {
		if ReasonOf(r.Err) != ReasonCanceled || r.Volumes != nil {
			t.Errorf("%s: %+v, want a Canceled error", r.Node, r)
		}
	}
	if got := NewPoller(reader, 4, clk).Poll(context.Background(), nil); len(got) != 0 {
		t.Fatalf("no nodes gave %v", got)
	}
}
