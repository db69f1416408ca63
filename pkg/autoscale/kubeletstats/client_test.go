package kubeletstats

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

func newTestClient(t *testing.T, o Options) *Client {
	t.Helper()
	c, err := NewClient(o)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

// wantError checks err is an *Error of reason whose message holds every string in want.
func wantError(t *testing.T, err error, reason Reason, want ...string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("got %v (%T), want an *Error of reason %s", err, err, reason)
	}
	if e.Reason != reason {
		t.Fatalf("got reason %s (%v), want %s", e.Reason, err, reason)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
}

// recorder is a kubelet stand-in that remembers the requests it got.
type recorder struct {
	mu       sync.Mutex
	auth     []string
	requests []*http.Request
	// accept, when set, is the only token answered with 200; others get 401.
	accept string
	body   []byte
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.auth = append(r.auth, req.Header.Get("Authorization"))
	r.requests = append(r.requests, req)
	accept := r.accept
	r.mu.Unlock()
	if accept != "" && req.Header.Get("Authorization") != "Bearer "+accept {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	summaryHandler(r.body)(w, req)
}

func (r *recorder) setAccept(token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.accept = token
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auth...)
}

func TestSummaryVerifiedAgainstCA(t *testing.T) {
	ca := newTestCA(t, "kubelet-ca")
	rec := &recorder{body: fixture(t)}
	port := kubeletServer(t, localCert(t, ca), rec)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, "sa-token-1\n")
	c := newTestClient(t, Options{CAFile: ca.file, TokenFile: tokenFile})

	summary, err := c.Summary(context.Background(), testNode("node-a", port))
	if err != nil {
		t.Fatal(err)
	}
	if summary.Node.NodeName != "node-a" || len(summary.Pods) != 6 {
		t.Fatalf("decoded node %q with %d pods, want node-a with 6", summary.Node.NodeName, len(summary.Pods))
	}
	if diff := diffVolumes(fixtureVolumes, Volumes(summary)); diff != "" {
		t.Fatalf("Volumes (-want +got):\n%s", diff)
	}
	req := rec.requests[0]
	if req.Method != http.MethodGet || req.URL.Path != "/stats/summary" || req.URL.RawQuery != "only_cpu_and_memory=false" {
		t.Errorf("request %s %s, want GET /stats/summary?only_cpu_and_memory=false", req.Method, req.URL)
	}
	if got := rec.seen(); len(got) != 1 || got[0] != "Bearer sa-token-1" {
		t.Errorf("Authorization headers %q, want one \"Bearer sa-token-1\" (trimmed)", got)
	}
}

func TestSummaryWrongCA(t *testing.T) {
	port := kubeletServer(t, localCert(t, newTestCA(t, "kubelet-ca")), summaryHandler(fixture(t)))
	other := newTestCA(t, "other-ca")
	c := newTestClient(t, Options{CAFile: other.file})
	_, err := c.Summary(context.Background(), testNode("node-a", port))
	wantError(t, err, ReasonTLS, "node node-a", "127.0.0.1:"+strconv.Itoa(int(port)),
		"not signed by a CA in "+other.file, "--kubelet-certificate-authority", "--kubelet-insecure-tls")
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("the x509 error is not kept in the chain: %v", err)
	}
}

func TestSummaryInsecure(t *testing.T) {
	// The server's CA is not given: only insecure mode can read it.
	port := kubeletServer(t, localCert(t, newTestCA(t, "kubelet-ca")), summaryHandler(fixture(t)))
	c := newTestClient(t, Options{InsecureSkipVerify: true})
	summary, err := c.Summary(context.Background(), testNode("node-a", port))
	if err != nil {
		t.Fatal(err)
	}
	if len(Volumes(summary)) != len(fixtureVolumes) {
		t.Fatalf("got %d volumes, want %d", len(Volumes(summary)), len(fixtureVolumes))
	}
}

func TestNewClientTLSOptions(t *testing.T) {
	ca := newTestCA(t, "ca")
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	writeToken(t, notPEM, "not a certificate")
	for name, tc := range map[string]struct {
		o    Options
		want string
	}{
		"neither":   {Options{}, "--kubelet-certificate-authority"},
		"both":      {Options{CAFile: ca.file, InsecureSkipVerify: true}, "both set"},
		"missing":   {Options{CAFile: filepath.Join(t.TempDir(), "nope.crt")}, "reading the CA file"},
		"not a PEM": {Options{CAFile: notPEM}, "holds no PEM certificate"},
	} {
		if _, err := NewClient(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, tc.want)
		}
	}
}

func TestSummaryAddressPreference(t *testing.T) {
	// Like kubelets whose serving certificates name only the host: the InternalIP is not in it.
	ca := newTestCA(t, "kubelet-ca")
	port := kubeletServer(t, ca.serving(t, nil, []string{"localhost"}), summaryHandler(fixture(t)))
	node := testNode("node-a", port,
		v1.NodeAddress{Type: v1.NodeInternalIP, Address: "127.0.0.1"},
		v1.NodeAddress{Type: v1.NodeHostName, Address: "localhost"})

	_, err := newTestClient(t, Options{CAFile: ca.file}).Summary(context.Background(), node)
	wantError(t, err, ReasonTLS, "node node-a", "does not name 127.0.0.1", "--kubelet-preferred-address-types")

	c := newTestClient(t, Options{CAFile: ca.file, AddressTypes: []v1.NodeAddressType{v1.NodeHostName, v1.NodeInternalIP}})
	if _, err := c.Summary(context.Background(), node); err != nil {
		t.Fatalf("with Hostname preferred: %v", err)
	}
}

func TestTokenReReadOn401(t *testing.T) {
	ca := newTestCA(t, "kubelet-ca")
	rec := &recorder{body: fixture(t), accept: "token-1"}
	port := kubeletServer(t, localCert(t, ca), rec)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, "token-1")
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC))
	c := newTestClient(t, Options{CAFile: ca.file, TokenFile: tokenFile, TokenRefresh: time.Hour, Clock: clk})
	node := testNode("node-a", port)
	if _, err := c.Summary(context.Background(), node); err != nil {
		t.Fatal(err)
	}

	// The kubelet rotates the projected token; the old one is no longer accepted. The cached
	// token is fresh by the clock, so only the 401 can make the client read the file again.
	rec.setAccept("token-2")
	writeToken(t, tokenFile, "token-2")
	if _, err := c.Summary(context.Background(), node); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	want := []string{"Bearer token-1", "Bearer token-1", "Bearer token-2"}
	if got := rec.seen(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("tokens sent %q, want %q", got, want)
	}

	// A 401 with a token that did not change is reported, not retried in a loop.
	rec.setAccept("token-3")
	_, err := c.Summary(context.Background(), node)
	wantError(t, err, ReasonUnauthorized, "node node-a", "HTTP 401", "the token file "+tokenFile, "--authentication-token-webhook")
	if got := len(rec.seen()); got != 4 {
		t.Fatalf("%d requests, want 4: one for an unchanged token after a 401", got)
	}
}

func TestTokenReReadAfterRefreshPeriod(t *testing.T) {
	ca := newTestCA(t, "kubelet-ca")
	rec := &recorder{body: fixture(t)}
	port := kubeletServer(t, localCert(t, ca), rec)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, "token-1")
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC))
	c := newTestClient(t, Options{CAFile: ca.file, TokenFile: tokenFile, TokenRefresh: time.Minute, Clock: clk})
	node := testNode("node-a", port)
	read := func() {
		t.Helper()
		if _, err := c.Summary(context.Background(), node); err != nil {
			t.Fatal(err)
		}
	}
	read()
	writeToken(t, tokenFile, "token-2")
	clk.SetTime(clk.Now().Add(59 * time.Second))
	read() // still the cached token: the file is not read for every request
	clk.SetTime(clk.Now().Add(time.Second))
	read()
	want := []string{"Bearer token-1", "Bearer token-1", "Bearer token-2"}
	if got := rec.seen(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("tokens sent %q, want %q", got, want)
	}

	writeToken(t, tokenFile, "  \n")
	clk.SetTime(clk.Now().Add(time.Minute))
	_, err := c.Summary(context.Background(), node)
	wantError(t, err, ReasonToken, "node node-a", "bearer token file "+tokenFile+" is empty")
}

func TestSummaryForbidden(t *testing.T) {
	ca := newTestCA(t, "kubelet-ca")
	// What a kubelet answers when its SubjectAccessReview says no.
	port := kubeletServer(t, localCert(t, ca), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Forbidden (user=system:serviceaccount:kube-system:volume-autoscaler, verb=get, resource=nodes, subresource(s)=[stats])",
			http.StatusForbidden)
	}))
	_, err := newTestClient(t, Options{CAFile: ca.file}).Summary(context.Background(), testNode("node-a", port))
	wantError(t, err, ReasonForbidden, "node node-a", "HTTP 403",
		"user=system:serviceaccount:kube-system:volume-autoscaler", "get on nodes/stats", "nodes/proxy is not needed")
}

func TestSummaryOtherStatusAndDecode(t *testing.T) {
	ca := newTestCA(t, "kubelet-ca")
	port := kubeletServer(t, localCert(t, ca), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stats/summary" {
			_, _ = w.Write([]byte("<html>not a summary</html>"))
		}
	}))
	_, err := newTestClient(t, Options{CAFile: ca.file}).Summary(context.Background(), testNode("node-a", port))
	wantError(t, err, ReasonDecode, "node node-a", "decoding the summary")

	port = kubeletServer(t, localCert(t, ca), http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "internal error: failed to get node info", http.StatusInternalServerError)
	}))
	_, err = newTestClient(t, Options{CAFile: ca.file}).Summary(context.Background(), testNode("node-a", port))
	wantError(t, err, ReasonStatus, "node node-a", "HTTP 500", "failed to get node info")
}

// hangingKubelet is a kubelet that accepts requests and answers (an empty 200) only once the
// client has gone away; under load net/http can hand that answer to the client that gave up
// (CI saw it: Decode instead of Timeout). entered gets a value for each request that reached
// the handler.
func hangingKubelet(t *testing.T, ca *testCA) (port int32, entered chan struct{}) {
	release := make(chan struct{})
	entered = make(chan struct{}, 10)
	port = kubeletServer(t, localCert(t, ca), http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release) }) // runs before the server's Close, which waits for handlers
	return port, entered
}

func TestSummaryTimeout(t *testing.T) {
	ca := newTestCA(t, "kubelet-ca")
	port, _ := hangingKubelet(t, ca)
	c := newTestClient(t, Options{CAFile: ca.file, Timeout: 200 * time.Millisecond})
	_, err := c.Summary(context.Background(), testNode("node-a", port))
	wantError(t, err, ReasonTimeout, "node node-a", "no answer within 200ms")
}

func TestSummaryCanceled(t *testing.T) {
	// The caller giving up (shutdown, lost leadership) is not the kubelet's fault: Canceled.
	ca := newTestCA(t, "kubelet-ca")
	port, entered := hangingKubelet(t, ca)
	c := newTestClient(t, Options{CAFile: ca.file, Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	_, err := c.Summary(ctx, testNode("node-a", port))
	wantError(t, err, ReasonCanceled, "node node-a")
}

func TestSummarySizeLimit(t *testing.T) {
	ca := newTestCA(t, "kubelet-ca")
	body := fixture(t)
	limit := int64(len(body) - 1)
	cases := map[string]struct {
		h    http.HandlerFunc
		size string
	}{
		// The kubelet normally sends a Content-Length: refused before reading.
		"with length": {func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			_, _ = w.Write(body)
		}, strconv.Itoa(len(body)) + " bytes"},
		// Chunked: the limit must hold while reading.
		"chunked": {func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write(body[:100])
			w.(http.Flusher).Flush()
			_, _ = w.Write(body[100:])
		}, "more than the limit"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			port := kubeletServer(t, localCert(t, ca), tc.h)
			c := newTestClient(t, Options{CAFile: ca.file, MaxResponseBytes: limit})
			_, err := c.Summary(context.Background(), testNode("node-a", port))
			wantError(t, err, ReasonTooLarge, "node node-a", "the summary is "+tc.size,
				"the limit is "+strconv.FormatInt(limit, 10)+" bytes")

			c = newTestClient(t, Options{CAFile: ca.file, MaxResponseBytes: int64(len(body))})
			if _, err := c.Summary(context.Background(), testNode("node-a", port)); err != nil {
				t.Fatalf("at exactly the limit: %v", err)
			}
		})
	}
}

func TestSummaryConnectionRefusedAndNoEndpoint(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close() // nothing listens there now
	c := newTestClient(t, Options{InsecureSkipVerify: true})
	_, err = c.Summary(context.Background(), testNode("node-a", int32(port)))
	wantError(t, err, ReasonRefused, "node node-a", "connection refused", "status.daemonEndpoints")

	_, err = c.Summary(context.Background(), testNode("node-b", 0))
	wantError(t, err, ReasonNoEndpoint, "node node-b", "kubeletEndpoint.port is 0")
	if ReasonOf(err) != ReasonNoEndpoint || ReasonOf(errors.New("other")) != "" {
		t.Fatalf("ReasonOf does not see through the error")
	}
}

func TestSummaryRedirectNotFollowed(t *testing.T) {
	// Whatever a redirect points at must not get the token.
	ca := newTestCA(t, "kubelet-ca")
	thief := &recorder{body: fixture(t)}
	thiefPort := kubeletServer(t, localCert(t, ca), thief)
	port := kubeletServer(t, localCert(t, ca), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://127.0.0.1:"+strconv.Itoa(int(thiefPort))+"/stats/summary", http.StatusFound)
	}))
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, "secret")
	c := newTestClient(t, Options{CAFile: ca.file, TokenFile: tokenFile})
	_, err := c.Summary(context.Background(), testNode("node-a", port))
	wantError(t, err, ReasonStatus, "node node-a", "HTTP 302")
	if got := thief.seen(); len(got) != 0 {
		t.Fatalf("the redirect was followed: %q", got)
	}
}

func TestSummaryFromAnotherNode(t *testing.T) {
	// node-b's address now belongs to node-a (say, a replaced cloud instance): its numbers must
	// not be taken as node-b's.
	ca := newTestCA(t, "kubelet-ca")
	port := kubeletServer(t, localCert(t, ca), summaryHandler(fixture(t)))
	_, err := newTestClient(t, Options{CAFile: ca.file}).Summary(context.Background(), testNode("node-b", port))
	wantError(t, err, ReasonWrongNode, "node node-b", "node node-a's", "status.addresses")
}
