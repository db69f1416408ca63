package leaseguard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"
)

// TestGuard: only successful Lease creates and updates count as renewals; the guard passes for
// less than a lease duration after the last one, and fails before any.
func TestGuard(t *testing.T) {
	clk := testclock.NewFakePassiveClock(time.Date(2026, 11, 25, 11, 0, 0, 0, time.UTC))
	g := New(15*time.Second, clk)
	fail := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail {
			w.WriteHeader(http.StatusConflict)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: g.Wrap(http.DefaultTransport)}
	send := func(method, path string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	lease := "/apis/coordination.k8s.io/v1/namespaces/default/leases/external-resizer-x"
	if err := g.Check(); err == nil {
		t.Fatal("Check passed before any renewal")
	}
	send(http.MethodGet, lease)
	send(http.MethodPost, "/api/v1/namespaces/default/events")
	if err := g.Check(); err == nil {
		t.Fatal("a read of the Lease or another write counted as a renewal")
	}
	send(http.MethodPut, lease)
	clk.SetTime(clk.Now().Add(14 * time.Second))
	if err := g.Check(); err != nil {
		t.Fatalf("14s after a renewal with a 15s lease: %v", err)
	}
	fail = true
	send(http.MethodPut, lease)
	clk.SetTime(clk.Now().Add(time.Second))
	if err := g.Check(); err == nil || !strings.Contains(err.Error(), "15s ago") {
		t.Fatalf("15s after the last successful renewal (a failed one since): %v, want an error naming the age", err)
	}
	fail = false
	send(http.MethodPost, "/apis/coordination.k8s.io/v1/namespaces/default/leases")
	if err := g.Check(); err != nil {
		t.Fatalf("after a successful create: %v", err)
	}
}
