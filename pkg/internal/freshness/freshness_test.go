package freshness

import (
	"fmt"
	"testing"
	"time"
)

func TestBehind(t *testing.T) {
	tr := New()
	if tr.Behind("ns/a", "1") {
		t.Fatal("an object never written is behind")
	}
	// Two writes in one sync: 1 -> 2 -> 3.
	tr.Wrote("ns/a", "1", "2")
	tr.Wrote("ns/a", "2", "3")
	for _, rv := range []string{"1", "2"} {
		if !tr.Behind("ns/a", rv) {
			t.Errorf("cache at %s, replaced by this process's write, is not behind", rv)
		}
	}
	if tr.Behind("ns/b", "1") {
		t.Error("another object is behind")
	}
	if tr.Behind("ns/a", "3") {
		t.Error("cache at the latest write is behind")
	}
	// A version a write replaced stays known after a newer one was seen: another controller
	// sharing the tracker may have read it just before (found by the soak: the modification
	// controller's sync on the echo dropped the record while the expansion controller was
	// deciding on the version its own write had replaced, and it called the driver again).
	if !tr.Behind("ns/a", "1") {
		t.Error("a replaced version is no longer behind once a newer one was seen")
	}
}

func TestNoOpWriteIsNotRecorded(t *testing.T) {
	tr := New()
	tr.Wrote("ns/a", "5", "5")
	if tr.Behind("ns/a", "5") {
		t.Error("a write that changed nothing made the current version stale")
	}
	tr.Wrote("ns/a", "", "6")
	if tr.Behind("ns/a", "") {
		t.Error("an object with no version is behind")
	}
}

func TestForgetAndBound(t *testing.T) {
	tr := New()
	for i := range 20 {
		tr.Wrote("ns/a", fmt.Sprint(i), fmt.Sprint(i+1))
	}
	if tr.Behind("ns/a", "0") {
		t.Error("more versions kept than maxReplaced")
	}
	tr.Wrote("ns/a", "30", "31")
	tr.Forget("ns/a")
	if tr.Behind("ns/a", "30") {
		t.Error("Forget kept the record")
	}
}

// TestHold: a hold lasts until it ends whatever versions come meanwhile, for its holder only,
// and a change of the intent ends it.
func TestHold(t *testing.T) {
	tr := New()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tr.Hold("expand", "ns/a", "10Gi", now.Add(time.Second))
	if got := tr.HeldFor("expand", "ns/a", "10Gi", now); got != time.Second {
		t.Errorf("held for %s, want 1s", got)
	}
	if ok, err := tr.Decidable("expand", "ns/a", "42", "10Gi", now); ok || err == nil {
		t.Errorf("another version with the same intent: decidable=%v err=%v, want held", ok, err)
	}
	if got := tr.HeldFor("modify", "ns/a", "10Gi", now); got != 0 {
		t.Errorf("another holder held for %s", got)
	}
	if got := tr.HeldFor("expand", "ns/b", "10Gi", now); got != 0 {
		t.Errorf("another key held for %s", got)
	}
	if got := tr.HeldFor("expand", "ns/a", "10Gi", now.Add(time.Second)); got != 0 {
		t.Errorf("held for %s after the hold ended", got)
	}
	tr.Hold("expand", "ns/a", "10Gi", now.Add(time.Second))
	if got := tr.HeldFor("expand", "ns/a", "12Gi", now); got != 0 {
		t.Errorf("a new intent held for %s", got)
	}
	if got := tr.HeldFor("expand", "ns/a", "10Gi", now); got != 0 {
		t.Errorf("the hold survived a change of the intent: %s", got)
	}
	tr.Hold("expand", "ns/a", "10Gi", now.Add(time.Second))
	tr.Forget("ns/a")
	if got := tr.HeldFor("expand", "ns/a", "10Gi", now); got != 0 {
		t.Errorf("the hold survived Forget: %s", got)
	}
}
