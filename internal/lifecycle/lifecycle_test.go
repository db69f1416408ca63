package lifecycle

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// deadline bounds every wait of these tests; a correct run takes milliseconds.
const deadline = 30 * time.Second

func within(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(deadline):
		t.Fatalf("%s: not within %s", what, deadline)
	}
}

// Without leader election: the controllers' own failure is the result; after the stop, what
// they return is not an error; controllers that do not stop within the grace are reported.
func TestRunWithoutElection(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		stop     bool
		returns  bool // the controllers return (boom) once their context ends, or at once when !stop
		wantErr  error
		wantNone bool
	}{
		{name: "fails by itself", returns: true, wantErr: boom},
		{name: "stopped, returns the stop's error", stop: true, returns: true, wantNone: true},
		{name: "stopped, does not return", stop: true, wantErr: ErrNotStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			hang := make(chan struct{})
			defer close(hang)
			running := make(chan struct{})
			run := func(ctx context.Context) error {
				close(running)
				if tc.stop {
					<-ctx.Done()
				}
				if !tc.returns {
					<-hang
				}
				return boom
			}
			result := make(chan error, 1)
			go func() { result <- Run(ctx, 10*time.Millisecond, nil, run) }()
			within(t, "the controllers start", running)
			if tc.stop {
				cancel()
			}
			var err error
			select {
			case err = <-result:
			case <-time.After(deadline):
				t.Fatalf("Run did not return within %s", deadline)
			}
			if tc.wantNone && err != nil || !tc.wantNone && !errors.Is(err, tc.wantErr) {
				t.Errorf("Run = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// A process that has seen the stop before it could start its controllers (a standby winning
// the Lease at that moment) starts nothing: Run has already reported "nothing runs".
func TestNoStartAfterTheStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	w := &worker{stop: ctx, run: func(context.Context) error { called = true; return nil }, started: make(chan struct{}), done: make(chan error, 1)}
	if err := w.wait(time.Minute); err != nil {
		t.Fatalf("wait = %v, want nil (nothing started)", err)
	}
	w.start(context.Background())
	if called || w.hasStarted() {
		t.Error("the controllers started after the stop was seen")
	}
}

// testElection is an election on a fake clientset whose Lease updates are recorded.
type testElection struct {
	client *fake.Clientset
	// release is called with each Lease update that clears the holder: a release.
	release func()
}

func newTestElection(t *testing.T) *testElection {
	te := &testElection{client: fake.NewClientset(), release: func() {}}
	te.client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if ptr.Deref(l.Spec.HolderIdentity, "") == "" {
			te.release()
		}
		return false, nil, nil
	})
	return te
}

func (te *testElection) elector(t *testing.T, release bool, mux *http.ServeMux) *Elector {
	t.Helper()
	el, err := NewElector(context.Background(), Election{
		Client: te.client, Lease: "my.lease", Namespace: "ns", Identity: "host_1234", Labels: map[string]string{"team": "storage"},
		LeaseDuration: time.Minute, RenewDeadline: 30 * time.Second, RetryPeriod: time.Second, Release: release, Health: mux,
	})
	if err != nil {
		t.Fatal(err)
	}
	return el
}

func (te *testElection) lease(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	l, err := te.client.CoordinationV1().Leases("ns").Get(context.Background(), "my-lease", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// runLeader runs an election until this process leads, stops it, and returns Run's result,
// whether the controllers had returned at the moment of a release (nil: no release), and the
// Lease after Run returned.
func runLeader(t *testing.T, release bool) (error, *bool, *coordinationv1.Lease) {
	te := newTestElection(t)
	var returned atomic.Bool
	var releasedAfterReturn *bool
	te.release = func() { releasedAfterReturn = ptr.To(returned.Load()) }
	leading := make(chan struct{})
	run := func(ctx context.Context) error {
		close(leading)
		<-ctx.Done()
		returned.Store(true)
		return nil
	}
	stop, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan error, 1)
	el := te.elector(t, release, nil)
	go func() { result <- Run(stop, time.Minute, el, run) }()
	within(t, "leading", leading)
	if h := ptr.Deref(te.lease(t).Spec.HolderIdentity, ""); h != "host-1234" {
		t.Errorf("holder %q while leading, want the sanitized identity host-1234", h)
	}
	cancel()
	select {
	case err := <-result:
		return err, releasedAfterReturn, te.lease(t)
	case <-time.After(deadline):
		t.Fatalf("Run did not return within %s of the stop", deadline)
	}
	return nil, nil, nil
}

// The leader, stopped: its controllers return first, then the Lease is released (holder
// cleared), and Run returns nil: the process exits 0. The Lease has the sanitized name and the
// labels.
func TestLeaderStopsWorkersThenReleases(t *testing.T) {
	err, releasedAfterReturn, lease := runLeader(t, true)
	if err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	switch {
	case releasedAfterReturn == nil:
		t.Errorf("no release of the Lease; holder %q", ptr.Deref(lease.Spec.HolderIdentity, ""))
	case !*releasedAfterReturn:
		t.Error("the Lease was released while the controllers were still running")
	}
	if lease.Labels["team"] != "storage" {
		t.Errorf("Lease labels %v, want team=storage", lease.Labels)
	}
}

// Without Release (csi-resizer without ReleaseLeaderElectionOnExit), the stopped leader leaves
// the Lease to expire, and still exits 0.
func TestLeaderWithoutReleaseKeepsTheLease(t *testing.T) {
	err, releasedAfterReturn, lease := runLeader(t, false)
	if err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if releasedAfterReturn != nil || ptr.Deref(lease.Spec.HolderIdentity, "") != "host-1234" {
		t.Errorf("holder %q after the stop, want host-1234 still (left to expire)", ptr.Deref(lease.Spec.HolderIdentity, ""))
	}
}

// A standby, stopped, starts nothing, leaves the leader's Lease alone and returns nil at once.
func TestStandbyStopsAtOnce(t *testing.T) {
	te := newTestElection(t)
	now := metav1.NewMicroTime(time.Now())
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "my-lease"}, Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To("other"), LeaseDurationSeconds: ptr.To[int32](3600), AcquireTime: &now, RenewTime: &now}}
	if _, err := te.client.CoordinationV1().Leases("ns").Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tried := make(chan struct{})
	var once atomic.Bool
	te.client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if once.CompareAndSwap(false, true) {
			close(tried)
		}
		return false, nil, nil
	})
	stop, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan error, 1)
	var started atomic.Bool
	el := te.elector(t, true, nil)
	go func() {
		result <- Run(stop, time.Minute, el, func(context.Context) error { started.Store(true); return nil })
	}()
	within(t, "a try for the Lease", tried)
	cancel()
	select {
	case err := <-result:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(deadline):
		t.Fatalf("Run did not return within %s of the stop", deadline)
	}
	if started.Load() {
		t.Error("the standby started its controllers")
	}
	if h := ptr.Deref(te.lease(t).Spec.HolderIdentity, ""); h != "other" {
		t.Errorf("holder %q, want the leader's, other", h)
	}
}

// The health check is csi-lib-utils': /healthz/leader-election answers ok (a process that does
// not lead is healthy).
func TestHealthCheck(t *testing.T) {
	mux := http.NewServeMux()
	newTestElection(t).elector(t, true, mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, HealthPath, nil))
	if rec.Code != http.StatusOK || rec.Body.String() != "ok" {
		t.Errorf("GET %s = %d %q, want 200 ok", HealthPath, rec.Code, rec.Body.String())
	}
}

func TestSanitizeName(t *testing.T) {
	for in, want := range map[string]string{
		"external-resizer-hostpath.csi.k8s.io": "external-resizer-hostpath-csi-k8s-io",
		"host_1a2b":                            "host-1a2b",
		"driver.":                              "driver-X",
	} {
		if got := SanitizeName(in); got != want {
			t.Errorf("SanitizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

// With POD_UID, the identity is the same for every process of one pod (a restarted container
// takes its Lease back at once) and differs between pods; without it, between processes.
func TestIdentityFromThePodUID(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvPodUID, "7d3c0e6a-8f1b-4c2a-9e5d-0b1a2c3d4e5f")
	first, _ := Identity()
	again, _ := Identity()
	t.Setenv(EnvPodUID, "0f0e0d0c-0b0a-4908-8706-050403020100")
	otherPod, _ := Identity()
	t.Setenv(EnvPodUID, "")
	random1, _ := Identity()
	random2, _ := Identity()
	if first != again {
		t.Errorf("one pod's UID gave %q, then %q: a restarted container would wait for its own Lease to expire", first, again)
	}
	if first == otherPod || random1 == random2 {
		t.Errorf("two pods (or two processes without POD_UID) share an identity: %q %q, %q %q", first, otherPod, random1, random2)
	}
	for _, id := range []string{first, otherPod, random1} {
		if !regexp.MustCompile(`^` + regexp.QuoteMeta(host) + `_[0-9a-f]{8}$`).MatchString(id) {
			t.Errorf("identity %q, want %s_ and 8 hex digits", id, host)
		}
	}
}

// A process whose identity holds a Lease that has not expired (its container's previous
// process, killed) leads at once.
func TestSameIdentityTakesItsLeaseBack(t *testing.T) {
	te := newTestElection(t)
	now := metav1.NewMicroTime(time.Now())
	mine := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "my-lease"}, Spec: coordinationv1.LeaseSpec{
		HolderIdentity: ptr.To("host-1234"), LeaseDurationSeconds: ptr.To[int32](3600), AcquireTime: &now, RenewTime: &now}}
	if _, err := te.client.CoordinationV1().Leases("ns").Create(context.Background(), mine, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stop, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	el := te.elector(t, false, nil)
	go func() {
		_ = Run(stop, time.Minute, el, func(ctx context.Context) error { close(started); <-ctx.Done(); return nil })
	}()
	within(t, "the controllers start on the Lease the same identity holds", started)
}
