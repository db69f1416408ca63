package sidecar

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// TestLeaderElection: the election the sidecar builds asks for upstream's Lease name, and with
// --leader-election and --http-endpoint the HTTP mux serves /healthz/leader-election; without
// the endpoint nothing is registered. No election is run: its end exits the process.
func TestLeaderElection(t *testing.T) {
	var leases []string
	saved := newElector
	newElector = func(client kubernetes.Interface, lease string, run func(context.Context)) elector {
		leases = append(leases, lease)
		return saved(client, lease, run)
	}
	t.Cleanup(func() { newElector = saved })
	// A client config is enough: building the election does not talk to the API.
	config := &rest.Config{Host: "http://127.0.0.1:1"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	for _, tc := range []struct {
		name     string
		endpoint string
		want     int
	}{
		{"with --http-endpoint", "127.0.0.1:0", http.StatusOK},
		{"without an HTTP endpoint", "", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leases = nil
			o := defaults(t)
			o.Common.LeaderElection = true
			o.Common.HttpEndpoint = tc.endpoint
			mux := http.NewServeMux()
			if _, err := newLeaderElection(ctx, config, o, "hostpath.csi.k8s.io", mux, func(context.Context) {}); err != nil {
				t.Fatal(err)
			}
			if len(leases) != 1 || leases[0] != "external-resizer-hostpath-csi-k8s-io" {
				t.Errorf("Leases asked for: %q, want [external-resizer-hostpath-csi-k8s-io]", leases)
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz/leader-election", nil))
			if rec.Code != tc.want {
				t.Errorf("GET /healthz/leader-election = %d %q, want %d", rec.Code, rec.Body.String(), tc.want)
			}
		})
	}
}
