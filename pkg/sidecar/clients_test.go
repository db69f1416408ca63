package sidecar

import (
	"testing"

	"k8s.io/client-go/rest"
)

// The events' client and the clientset of everything else take tokens from one bucket of
// --kube-api-qps/--kube-api-burst: once the other requests have used the burst, an event
// finds nothing left, and the other way round.
func TestClientsShareOneBudget(t *testing.T) {
	for _, first := range []string{"status writes", "events"} {
		t.Run(first+" first", func(t *testing.T) {
			client, events, err := newClients(&rest.Config{Host: "https://127.0.0.1:1", QPS: 0.001, Burst: 3})
			if err != nil {
				t.Fatal(err)
			}
			mainLimiter := client.CoreV1().RESTClient().GetRateLimiter()
			eventLimiter := events.RESTClient().GetRateLimiter()
			for _, l := range []any{mainLimiter, eventLimiter} {
				if l == nil {
					t.Fatal("a client without a rate limiter")
				}
			}
			if client.StorageV1().RESTClient().GetRateLimiter() != mainLimiter {
				t.Fatal("the clientset's API groups do not share one rate limiter")
			}
			a, b := mainLimiter, eventLimiter
			if first == "events" {
				a, b = b, a
			}
			for i := range 3 {
				if !a.TryAccept() {
					t.Fatalf("token %d of the burst of 3 refused", i+1)
				}
			}
			if b.TryAccept() {
				t.Fatal("the other client got a token beyond the shared burst: the two have separate budgets")
			}
		})
	}
}
