// Package leaseguard keeps a leader that may have lost its Lease from calling the CSI driver.
//
// The leader election (client-go's, through internal/lifecycle) notices a lost Lease only when a renewal
// fails, up to --leader-election-renew-deadline later. A process that was paused (SIGSTOP, a
// frozen VM, a long stop-the-world) longer than the lease duration wakes up still believing it
// leads, while another replica has taken the Lease, and for those seconds two resizers call the
// driver for the same volumes. The guard closes that window from the only fact the process can
// trust: when its own last renewal succeeded. Other candidates take the Lease only once it has
// gone unrenewed for a whole lease duration after they saw that renewal, so while the last
// successful renewal began less than a lease duration ago, nobody else holds the Lease
// (docs/design.md §2.1).
package leaseguard

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Guard records the leader election client's successful Lease writes and answers whether the
// last one is recent enough to act on.
type Guard struct {
	leaseDuration time.Duration
	clock         clock.PassiveClock

	mu      sync.Mutex
	renewed time.Time // start of the last successful create or update of the Lease
}

// New returns a guard for a Lease held with leaseDuration (--leader-election-lease-duration).
func New(leaseDuration time.Duration, clk clock.PassiveClock) *Guard {
	return &Guard{leaseDuration: leaseDuration, clock: clk}
}

// Wrap is a rest.Config WrapTransport for the leader election's own client: every request
// that creates or updates a Lease and succeeds is a renewal, timed from when it was sent (the
// renewTime it carries is no later than that).
func (g *Guard) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		sent := g.clock.Now()
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode/100 == 2 && isLeaseWrite(req) {
			g.mu.Lock()
			if sent.After(g.renewed) {
				g.renewed = sent
			}
			g.mu.Unlock()
		}
		return resp, err
	})
}

// Check returns nil when this process's last Lease renewal began less than a lease duration
// ago, and an error naming how old it is otherwise.
func (g *Guard) Check() error {
	g.mu.Lock()
	renewed := g.renewed
	g.mu.Unlock()
	if renewed.IsZero() {
		return fmt.Errorf("the leader election Lease was never renewed by this process: not acting as the leader")
	}
	if age := g.clock.Since(renewed); age >= g.leaseDuration {
		return fmt.Errorf("this process last renewed its leader election Lease %s ago, longer than the lease duration %s (it was probably paused): another replica may lead now, so it does not call the driver",
			age.Round(time.Millisecond), g.leaseDuration)
	}
	return nil
}

func isLeaseWrite(req *http.Request) bool {
	return (req.Method == http.MethodPut || req.Method == http.MethodPost) &&
		strings.HasPrefix(req.URL.Path, "/apis/coordination.k8s.io/") && strings.Contains(req.URL.Path, "/leases")
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
