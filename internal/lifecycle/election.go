package lifecycle

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/csi-resizer/csi-resizer/internal/events"
)

// HealthPath is where the leader election's health check is served: csi-lib-utils' path, which
// liveness probes written for the CSI sidecars use.
const HealthPath = "/healthz/leader-election"

// healthCheckTimeout is how long past the lease's expiry a leader that has not renewed it still
// counts as healthy: csi-lib-utils' DefaultHealthCheckTimeout.
const healthCheckTimeout = 20 * time.Second

// Election configures a Lease-based leader election the way csi-lib-utils' leaderelection
// package (used by upstream external-resizer and the other CSI sidecars) configures it, so that
// a replica of this project contends for the same Lease, under the same identity rules, as an
// upstream one or an older release: the Lease and identity sanitized alike, the same default
// namespace, labels, durations, events and health check.
//
// Why not csi-lib-utils itself: its election ends the process with exit status 1 (klog's
// FlushAndExit in its OnStoppedLeading callback) whenever leading stops, also after a release
// the process asked for, and also on a standby whose election is ended. A clean stop could not
// then exit 0, and a binary that must release could not do anything after the release. client-go's
// election, which csi-lib-utils wraps, lets the process decide: here a lost Lease still ends the
// process at once with status 1, as in csi-lib-utils, and a stop the process asked for does not.
type Election struct {
	// Client is the election's own client, so that a controller throttled by its rate limit
	// cannot starve the renewals.
	Client kubernetes.Interface
	// Lease is the Lease's name; characters a Lease name cannot hold are replaced
	// (SanitizeName).
	Lease string
	// Namespace of the Lease; empty means the pod's: POD_NAMESPACE, else the service account's,
	// else "default".
	Namespace string
	// Identity of this process on the Lease (Identity()), sanitized like the Lease's name.
	Identity string
	// Labels put on the Lease while this process leads.
	Labels map[string]string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Release gives the Lease up once the controllers have stopped, so a standby takes over at
	// once instead of after LeaseDuration.
	Release bool
	// Health, when set, serves the election's health check on HealthPath.
	Health *http.ServeMux
}

// Elector is a prepared leader election; Run runs it.
type Elector struct {
	elector     *leaderelection.LeaderElector
	lock        resourcelock.Interface
	broadcaster record.EventBroadcaster
	client      kubernetes.Interface
	namespace   string
	release     bool
	logger      klog.Logger

	// start runs the controllers once this process leads; set by run before the election starts.
	start func(context.Context)
	// stopping: the process ends the election itself, so leading stops without a loss.
	stopping atomic.Bool
}

// NewElector prepares the election e describes, and registers its health check. Nothing is
// asked of the API until Run.
func NewElector(ctx context.Context, e Election) (*Elector, error) {
	el := &Elector{client: e.Client, namespace: e.Namespace, release: e.Release, logger: klog.FromContext(ctx)}
	if el.namespace == "" {
		el.namespace = podNamespace()
	}
	el.broadcaster = events.NewBroadcaster(ctx)
	recorder := el.broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: e.Lease + "/" + e.Identity})
	lock, err := resourcelock.NewWithLabels(resourcelock.LeasesResourceLock, el.namespace, SanitizeName(e.Lease),
		e.Client.CoreV1(), e.Client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: SanitizeName(e.Identity), EventRecorder: recorder}, e.Labels)
	if err != nil {
		return nil, err
	}
	el.lock = lock
	var health *leaderelection.HealthzAdaptor
	if e.Health != nil {
		health = leaderelection.NewLeaderHealthzAdaptor(healthCheckTimeout)
		e.Health.Handle(HealthPath, healthHandler(health.Check))
	}
	el.elector, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		// The name labels leader_election_master_status. csi-lib-utils leaves it empty, which
		// leaves CSIResizerNoLeader (deploy/prometheus) no Lease to tell replicas apart by.
		Name:            SanitizeName(e.Lease),
		Lock:            lock,
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: e.Release,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: el.onStartedLeading,
			OnStoppedLeading: el.onStoppedLeading,
			OnNewLeader:      func(identity string) { el.logger.V(3).Info("New leader detected", "leader", identity) },
		},
		WatchDog: health,
	})
	if err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	if health != nil {
		health.SetLeaderElection(el.elector)
	}
	return el, nil
}

// run runs the election until ctx ends, starting the controllers with start while leading.
func (el *Elector) run(ctx context.Context, start func(context.Context)) {
	el.start = start
	el.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: el.client.CoreV1().Events(el.namespace)})
	el.elector.Run(ctx)
}

// end ends the election (endElection cancels its context) after the controllers stopped, and
// waits until it has ended (ended): with Release, client-go gives the Lease up on the way.
func (el *Elector) end(ctx context.Context, led bool, endElection func(), ended <-chan struct{}) {
	logger := klog.FromContext(ctx)
	if led && el.release {
		logger.Info("Releasing the Lease", "lease", el.describe())
	}
	el.stopping.Store(true)
	endElection()
	<-ended
	el.broadcaster.Shutdown()
	switch {
	case !led:
	case !el.release:
		logger.Info("Leaving the Lease to expire", "lease", el.describe())
	case el.elector.IsLeader():
		logger.Info("The Lease could not be released: a standby takes over when it expires", "lease", el.describe())
	default:
		logger.Info("Lease released", "lease", el.describe())
	}
}

func (el *Elector) onStartedLeading(ctx context.Context) {
	klog.FromContext(ctx).V(2).Info("became leader, starting")
	el.start(ctx)
}

// onStoppedLeading ends the process when leading stopped without the process asking: the
// Lease was lost (a renewal failed), another replica may already lead, and the controllers
// may still be writing; exiting is the one way to stop them at once (as csi-lib-utils does).
func (el *Elector) onStoppedLeading() {
	if el.stopping.Load() {
		return
	}
	el.logger.Error(nil, "Stopped leading")
	klog.FlushAndExit(klog.ExitFlushTimeout, 1)
}

func (el *Elector) describe() string { return el.lock.Describe() }

// healthHandler serves check as csi-lib-utils does: "ok", or 500 with the error.
func healthHandler(check func(*http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := check(r); err != nil {
			http.Error(w, fmt.Sprintf("internal server error: %v", err), http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	}
}

// SanitizeName makes name usable as a Lease name or holder identity as csi-lib-utils does:
// every character other than a letter, a digit or "-" becomes "-", and an "X" is appended
// when the result ends in "-".
func SanitizeName(name string) string {
	name = invalidNameChars.ReplaceAllString(name, "-")
	if strings.HasSuffix(name, "-") {
		name += "X"
	}
	return name
}

var invalidNameChars = regexp.MustCompile("[^a-zA-Z0-9-]")

// EnvPodUID names the variable the shipped manifests set to the pod's UID (the downward API's
// metadata.uid), from which Identity derives its suffix.
const EnvPodUID = "POD_UID"

// Identity is this process's identity on a Lease: the host name plus 8 hex digits.
// csi-lib-utils' default, the host name alone, gives two replicas on one host (or a pod name
// reused by a replacement pod that starts while the old one still runs) the same identity, and
// client-go then lets both lead at once, each renewing "its" Lease. With POD_UID set the digits
// are a hash of the pod's UID: a container the kubelet restarts in its pod (after an OOM kill or
// a crash; the kubelet starts it only once the old process has exited) takes its Lease back at
// once, as upstream's does, instead of waiting for it to expire, while a replacement pod has
// another UID. Without POD_UID they are random (docs/design.md §2.1, leader election and identity).
func Identity() (string, error) {
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("reading the host name for the leader identity: %w", err)
	}
	suffix := make([]byte, 4)
	if uid := os.Getenv(EnvPodUID); uid != "" {
		sum := sha256.Sum256([]byte(uid))
		copy(suffix, sum[:])
	} else if _, err := rand.Read(suffix); err != nil {
		return "", fmt.Errorf("reading randomness for the leader identity: %w", err)
	}
	return host + "_" + hex.EncodeToString(suffix), nil
}

// podNamespace is csi-lib-utils' default namespace of the Lease: POD_NAMESPACE, else the
// service account's, else "default".
func podNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(data)); ns != "" {
			return ns
		}
	}
	return "default"
}
