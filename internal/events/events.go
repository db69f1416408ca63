// Package events gives both controllers an event broadcaster that keeps working after the
// stop signal and is flushed when it is shut down. client-go's broadcaster, built with the
// signal's context, stops at the signal: the events of the items the workers still finish on
// the way out (the answer of a driver call in flight, say) were dropped with "broadcaster
// already stopped" (docs/design.md §1, "One way to stop").
package events

import (
	"context"
	"crypto/rand"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
)

// FlushTimeout bounds how long Shutdown waits for the queued events to be written: the
// process's termination grace period must leave room for it.
const FlushTimeout = 5 * time.Second

// Broadcaster is a record.EventBroadcaster whose Shutdown first writes every event recorded
// before it. Its events go through one goroutine in order, so a marker event recorded at
// Shutdown reaches the sink after all of them; the sink recognizes it and does not send it.
type Broadcaster struct {
	record.EventBroadcaster
	logger  klog.Logger
	marker  types.UID
	flushed chan struct{}
	once    sync.Once
	started atomic.Bool
}

// NewBroadcaster returns a broadcaster that carries ctx's logger but not its cancellation.
func NewBroadcaster(ctx context.Context) *Broadcaster {
	return &Broadcaster{
		EventBroadcaster: record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx))),
		logger:           klog.FromContext(ctx),
		marker:           types.UID("flush-" + rand.Text()),
		flushed:          make(chan struct{}),
	}
}

// StartRecordingToSink writes the events to sink, but for Shutdown's marker.
func (b *Broadcaster) StartRecordingToSink(sink record.EventSink) watch.Interface {
	b.started.Store(true)
	return b.EventBroadcaster.StartRecordingToSink(&flushSink{EventSink: sink, b: b})
}

// Shutdown waits up to FlushTimeout for the events recorded so far to be written, then stops
// the broadcaster. Call it once the workers have stopped.
func (b *Broadcaster) Shutdown() {
	if b.started.Load() {
		ref := &v1.ObjectReference{Kind: "Flush", Namespace: v1.NamespaceDefault, Name: "flush", UID: b.marker}
		b.EventBroadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "flush"}).
			Event(ref, v1.EventTypeNormal, "Flush", "flush")
		select {
		case <-b.flushed:
		case <-time.After(FlushTimeout):
			b.logger.Info("Stopping with events not yet written", "waited", FlushTimeout)
		}
	}
	b.EventBroadcaster.Shutdown()
}

// flushSink is the API sink, which swallows the marker and reports that it came.
type flushSink struct {
	record.EventSink
	b *Broadcaster
}

func (s *flushSink) Create(e *v1.Event) (*v1.Event, error) {
	if e.InvolvedObject.UID == s.b.marker {
		s.b.once.Do(func() { close(s.b.flushed) })
		return e, nil
	}
	return s.EventSink.Create(e)
}

// Start returns a broadcaster writing to the API's events through client, and its recorder for
// component. Call Shutdown on the broadcaster once the workers have stopped.
func Start(ctx context.Context, client kubernetes.Interface, component string) (*Broadcaster, record.EventRecorder) {
	b := NewBroadcaster(ctx)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b, b.NewRecorder(scheme.Scheme, v1.EventSource{Component: component})
}
