package sidecar

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/csi-resizer/csi-resizer/internal/lifecycle"
)

func TestLeaseName(t *testing.T) {
	for driver, want := range map[string]string{
		"hostpath.csi.k8s.io": "external-resizer-hostpath-csi-k8s-io",
		"ebs.csi.aws.com":     "external-resizer-ebs-csi-aws-com",
		"my_driver/v1":        "external-resizer-my-driver-v1",
		"driver.":             "external-resizer-driver-X", // a name must not end in "-"
	} {
		if got := leaseName(driver); got != want {
			t.Errorf("leaseName(%q) = %q, want %q", driver, got, want)
		}
	}
}

// TestLeaderElection: the election the sidecar builds asks for upstream's Lease name, releases
// the Lease only with ReleaseLeaderElectionOnExit, and with --leader-election and
// --http-endpoint the HTTP mux serves /healthz/leader-election; without the endpoint nothing is
// registered. No election is run.
func TestLeaderElection(t *testing.T) {
	// A client config is enough: building the election does not talk to the API.
	config := &rest.Config{Host: "http://127.0.0.1:1"}
	for _, tc := range []struct {
		name     string
		endpoint string
		gates    map[string]bool
		want     int
	}{
		{"with --http-endpoint", "127.0.0.1:0", nil, http.StatusOK},
		{"without an HTTP endpoint", "", nil, http.StatusNotFound},
		{"with ReleaseLeaderElectionOnExit", "", map[string]bool{"ReleaseLeaderElectionOnExit": true}, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := defaults(t)
			o.Common.LeaderElection = true
			o.Common.HttpEndpoint = tc.endpoint
			o.gates = tc.gates
			if err := o.ApplyFeatureGates(); err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			e, err := leaderElection(config, o, "hostpath.csi.k8s.io", mux)
			if err != nil {
				t.Fatal(err)
			}
			if e.Lease != "external-resizer-hostpath-csi-k8s-io" {
				t.Errorf("Lease %q, want external-resizer-hostpath-csi-k8s-io", e.Lease)
			}
			if want := tc.gates["ReleaseLeaderElectionOnExit"]; e.Release != want {
				t.Errorf("Release = %t, want %t (the gate)", e.Release, want)
			}
			if e.LeaseDuration != o.Common.LeaderElectionLeaseDuration || e.RenewDeadline != o.Common.LeaderElectionRenewDeadline || e.RetryPeriod != o.Common.LeaderElectionRetryPeriod {
				t.Errorf("durations %s/%s/%s, want the flags'", e.LeaseDuration, e.RenewDeadline, e.RetryPeriod)
			}
			if _, err := lifecycle.NewElector(context.Background(), e); err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz/leader-election", nil))
			if rec.Code != tc.want {
				t.Errorf("GET /healthz/leader-election = %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
		})
	}
}
