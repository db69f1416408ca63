package freshness

import (
	"fmt"
	"testing"
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
	// The record is dropped once the cache has caught up: an old version is no longer known.
	if tr.Behind("ns/a", "1") {
		t.Error("the record survived a cache that caught up")
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
