//go:build integration

package soak

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

const gi = int64(1) << 30

// The resizers' timing: short leases so that leader changes happen within the run, a
// --timeout that injected delays exceed, a small --retry-interval-max so that the quiet period
// (2 × retryMax) stays short.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = 1 * time.Second
	callTimeout   = 5 * time.Second
	retryStart    = 1 * time.Second
	retryMax      = 10 * time.Second
)

// The driver's size policy, in force for the whole run, quiet period included: what it refuses
// for good. A PVC left asking for more is explained by the infeasible state and its reason.
const (
	outOfRangeFrom      = 40 * gi // OUT_OF_RANGE from here
	invalidArgumentFrom = 60 * gi // INVALID_ARGUMENT from here
	badClass            = "refused"
	badParameter        = "tier=refused"
)

// config is the soak's shape, from the environment.
type config struct {
	Seed      int64
	Duration  time.Duration // chaos phase
	PVCs      int
	Spaces    int // namespaces the PVCs are spread over, each with its ResourceQuota
	Report    string
	Resizers  int
	QuietTime time.Duration
}

func loadConfig(t *testing.T) config {
	c := config{Seed: 1, Duration: 20 * time.Minute, PVCs: 300, Spaces: 3, Resizers: 2, QuietTime: 2 * retryMax}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: %v (want an integer, e.g. SOAK_SEED=1)", v, err)
		}
		c.Seed = n
	}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("SOAK_DURATION=%q: want a positive Go duration, e.g. SOAK_DURATION=20m (%v)", v, err)
		}
		c.Duration = d
	}
	if v := os.Getenv("SOAK_PVCS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < c.Spaces {
			t.Fatalf("SOAK_PVCS=%q: want an integer of at least %d, e.g. SOAK_PVCS=300", v, c.Spaces)
		}
		c.PVCs = n
	}
	c.Report = os.Getenv("SOAK_REPORT")
	if c.Report == "" {
		c.Report = filepath.Join(t.TempDir(), "soak-report.json")
	}
	return c
}

// TestSoak is the soak: set up, chaos for SOAK_DURATION, a quiet period, then the invariants.
func TestSoak(t *testing.T) {
	if os.Getenv("SOAK") != "1" {
		t.Skip("the soak runs only with SOAK=1 (make soak)")
	}
	cfg := loadConfig(t)
	t.Logf("soak: seed=%d duration=%s pvcs=%d namespaces=%d report=%s", cfg.Seed, cfg.Duration, cfg.PVCs, cfg.Spaces, cfg.Report)
	s := setUp(t, cfg)
	s.runChaos(t)
	s.quiet(t)
	violations := s.check(t)
	rep := s.report(t, violations)
	events := strings.TrimSuffix(cfg.Report, ".json") + ".chaos.jsonl"
	if err := s.chaos.write(events); err != nil {
		t.Errorf("writing the chaos events: %v", err)
	}
	logs := strings.TrimSuffix(cfg.Report, ".json") + ".logs"
	s.keepLogs(t, logs)
	t.Logf("report: %s; chaos events: %s; process logs: %s", cfg.Report, events, logs)
	for _, v := range violations {
		t.Errorf("%s\n%s", v, s.history(v.PVC))
	}
	t.Logf("figures:\n%s", rep)
}

// soak is one run: the environment, the recorder and the chaos log.
type soak struct {
	cfg        config
	commit     string
	env        *scenario.Env
	rng        *rand.Rand
	spaces     []string
	claims     []claimRef // every PVC
	editable   []claimRef // the PVCs users edit (not a StatefulSet's)
	sets       []string   // StatefulSets, in the env's namespace
	setResizer *framework.Process
	resizers   []*framework.Process
	rec        *recorder
	chaos      *chaosLog
	kubelet    *kubelet
	started    time.Time
	quietAt    time.Time     // end of the quiet period
	drained    time.Duration // from quietAt until every PVC had converged (or the drain time ran out)
	ev         *evidence
	// overlapsAfterTakeover counts calls of a new leader made while the driver still carried
	// out the previous leader's call for the same volume (not a violation, see checkInFlight).
	overlapsAfterTakeover int
}

// claimRef is one PVC of the soak; Set names its StatefulSet ("" for a PVC users edit).
type claimRef struct{ NS, Name, Volume, Set string }

func (c claimRef) key() string { return c.NS + "/" + c.Name }

func setUp(t *testing.T, cfg config) *soak {
	le := []string{"--leader-election",
		"--leader-election-lease-duration=" + leaseDuration.String(),
		"--leader-election-renew-deadline=" + renewDeadline.String(),
		"--leader-election-retry-period=" + retryPeriod.String(),
		"--retry-interval-start=" + retryStart.String(),
		"--retry-interval-max=" + retryMax.String(),
		"--timeout=" + callTimeout.String(),
		// The soak checks correctness, not the client's rate limit: at the default 5 QPS the
		// slow-rate retries of the PVCs left infeasible (one status write each per
		// --retry-interval-max) take the whole budget, and the rest waits (70 of 300 PVCs still
		// unserved 4.5 minutes after the quiet period, in a 20-minute run at 5 QPS).
		"--kube-api-qps=50", "--kube-api-burst=100",
		"-v=2"}
	e := scenario.Start(t, scenario.Options{
		Cluster: framework.ClusterOptions{ControllerManager: true,
			// The quota's used figure is checked at the end; a short full resync bounds how
			// long a missed update could leave it behind.
			ControllerManagerArgs: []string{"--resource-quota-sync-period=20s"}},
		Mock:        framework.MockDriverOptions{ModifyVolume: true, NodeExpansionRequired: true},
		MockDriver:  true,
		NoResizer:   true,
		ResizerArgs: le,
	})
	s := &soak{cfg: cfg, commit: commit(), env: e, rng: rand.New(rand.NewSource(cfg.Seed)), chaos: &chaosLog{logf: t.Logf}}
	e.CreateClass(t, "silver", map[string]string{"iops": "1000"})
	e.CreateClass(t, "gold", map[string]string{"iops": "3000"})
	e.CreateClass(t, badClass, map[string]string{"tier": "refused"})
	s.spaces = []string{e.Namespace}
	for len(s.spaces) < cfg.Spaces {
		s.spaces = append(s.spaces, framework.CreateNamespace(t, e.Ctx, e.Client, "soak"))
	}
	for _, ns := range s.spaces {
		q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "storage", Namespace: ns},
			Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsStorage: resource.MustParse("1Pi")}}}
		if _, err := e.Client.CoreV1().ResourceQuotas(ns).Create(e.Ctx, q, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create the ResourceQuota of %s: %v", ns, err)
		}
	}
	s.setFaults(t, nil)
	for i := 0; i < cfg.PVCs; i++ {
		ns := s.spaces[i%len(s.spaces)]
		name := fmt.Sprintf("pvc-%04d", i)
		vol, err := e.Driver.CreateVolume(e.Ctx, ns+"-"+name, gi)
		if err != nil {
			t.Fatal(err)
		}
		framework.CreateBoundClaim(t, e.Ctx, e.Client, ns, name, e.Driver.Name, vol, "1Gi", e.StorageClass)
		s.claims = append(s.claims, claimRef{NS: ns, Name: name, Volume: vol})
	}
	s.editable = append([]claimRef(nil), s.claims...)
	s.rec = startRecorder(t, e, s.spaces)
	s.setUpStatefulSets(t)
	for i := 0; i < cfg.Resizers; i++ {
		s.resizers = append(s.resizers, e.StartResizer(t))
	}
	s.started = time.Now()
	return s
}

// keepLogs copies the processes' logs next to the report: the test's temp dirs go when it ends,
// and a violation is explained by them.
func (s *soak) keepLogs(t *testing.T, dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("keeping the logs: %v", err)
		return
	}
	procs := map[string]*framework.Process{"kube-apiserver": s.env.Cluster.APIServer, "etcd": s.env.Cluster.Etcd,
		"mock-csi-driver": s.env.Driver.Process, "statefulset-resizer": s.setResizer}
	for i, p := range s.resizers {
		procs[fmt.Sprintf("csi-resizer-%d", i)] = p
	}
	for name, p := range procs {
		if p == nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name+".log"), []byte(p.Log()), 0o644); err != nil {
			t.Errorf("keeping the log of %s: %v", name, err)
		}
	}
}
