// Package freshness tells a controller whether its informer cache has caught up with the
// controller's own writes, so that no controller of this project acts on an object older than
// its last write (docs/design.md, "One reconcile shape").
//
// A write made from the cached version B of an object replaces B. Until the cache shows
// something other than B, or than any other version one of this process's writes replaced, it
// is behind: deciding on it would repeat the step the write recorded (a second driver call, a
// second event). resourceVersions are opaque, so "behind" is known only for versions the
// controller itself replaced. A replaced version never becomes current again, so the record of
// it stays (the last maxReplaced per object, until Forget) even after a newer version was seen:
// several controllers share one tracker, and one of them seeing a newer version says nothing of
// what another one read a moment earlier.
package freshness

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// maxReplaced bounds the versions kept per object: one sync writes a few times at most, and a
// relist that skips versions must not make the list grow.
const maxReplaced = 8

// Tracker is safe for concurrent use. The zero value is not usable; call New.
type Tracker struct {
	mu       sync.Mutex
	replaced map[string][]string
	// holds, by key then by holder (the controller that held it: several controllers share a
	// tracker and decide on the same objects independently).
	holds map[string]map[string]hold
}

// hold: the holder is not to decide on the object again before until, while what the user asks
// of it is still intent (Hold).
type hold struct {
	intent string
	until  time.Time
}

// New returns an empty tracker.
func New() *Tracker {
	return &Tracker{replaced: map[string][]string{}, holds: map[string]map[string]hold{}}
}

// Hold says that holder must not decide on key again before until while the object still asks
// for intent (the part of its spec the holder acts on: the requested size, the requested class):
// a driver call was decided on it and its answer could not be written, so the object still says
// what it said before the call. The echo of the controller's own pre-call write, or another
// writer's change of the status (another controller's, the kubelet's), can queue the key again
// while the call runs, and deciding at once would repeat the call (docs/design.md §2.3 rule 8).
// A change of the intent (a user's edit) is not held.
func (t *Tracker) Hold(holder, key, intent string, until time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holds[key] == nil {
		t.holds[key] = map[string]hold{}
	}
	t.holds[key][holder] = hold{intent: intent, until: until}
}

// Decidable is the check a controller's sync makes before deciding on version cached of key,
// whose intent is intent: false when the cache is behind this process's own write (Behind: the
// echo is on its way and queues the key again), and an error while the holder holds it (Hold):
// an error, not a delay, so that the work queue's per-key backoff keeps growing.
func (t *Tracker) Decidable(holder, key, cached, intent string, now time.Time) (bool, error) {
	if t.Behind(key, cached) {
		return false, nil
	}
	if held := t.HeldFor(holder, key, intent, now); held > 0 {
		return false, fmt.Errorf("the answer of the last driver call for %s is not recorded; not deciding on it again for another %s", key, held)
	}
	return true, nil
}

// HeldFor is how long holder must still wait before deciding on key while it asks for intent
// (Hold); 0 when it need not.
func (t *Tracker) HeldFor(holder, key, intent string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.holds[key][holder]
	if !ok {
		return 0
	}
	if h.intent != intent || !now.Before(h.until) {
		delete(t.holds[key], holder)
		if len(t.holds[key]) == 0 {
			delete(t.holds, key)
		}
		return 0
	}
	return h.until.Sub(now)
}

// Wrote records that a write based on the cached version basedOn produced version written. A
// write the apiserver found to change nothing keeps the version: the cache at it is current.
func (t *Tracker) Wrote(key, basedOn, written string) {
	if basedOn == "" || written == basedOn {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	versions := append(t.replaced[key], basedOn)
	if len(versions) > maxReplaced {
		versions = versions[len(versions)-maxReplaced:]
	}
	t.replaced[key] = versions
}

// Behind reports whether cached is a version one of this process's writes replaced.
func (t *Tracker) Behind(key, cached string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return cached != "" && slices.Contains(t.replaced[key], cached)
}

// Forget drops what is known of a deleted object.
func (t *Tracker) Forget(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.replaced, key)
	delete(t.holds, key)
}
