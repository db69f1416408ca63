//go:build integration

package soak

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// report is the soak's figures, printed and written as JSON.
type report struct {
	Commit          string         `json:"commit"`
	Seed            int64          `json:"seed"`
	Duration        string         `json:"chaosDuration"`
	Quiet           string         `json:"quietPeriod"`
	PVCs            int            `json:"pvcs"`
	Namespaces      int            `json:"namespaces"`
	Expansions      int            `json:"completedExpansions"`
	Recoveries      int            `json:"recoveries"`
	Modifications   int            `json:"completedModifications"`
	UserEdits       map[string]int `json:"userEdits"`
	FaultsInjected  map[string]int `json:"faultsInjectedByKind"`
	FaultEpochs     int            `json:"faultEpochs"`
	StatefulSets    int            `json:"statefulSets"`
	TemplateChanges int            `json:"templateChanges"`
	Kills           int            `json:"leaderKills"`
	Freezes         int            `json:"leaderFreezes"`
	APIRestarts     int            `json:"apiserverRestarts"`
	EtcdRestarts    int            `json:"etcdRestarts"`
	ResizerStarts   int            `json:"resizerRestarts"`
	LeaseChanges    int            `json:"leaseChanges"`
	KubeletSteps    map[string]int `json:"kubeletSteps"`
	Conflicts       map[string]int `json:"conflicts"`
	ExpandCalls     int            `json:"controllerExpandVolumeCalls"`
	ModifyCalls     int            `json:"controllerModifyVolumeCalls"`
	CallsPerExpand  float64        `json:"expandCallsPerCompletedExpansion"`
	MaxCallsPerPVC  int            `json:"maxExpandCallsForOnePVC"`
	MaxCallsPVC     string         `json:"maxExpandCallsPVC"`
	Overlaps        int            `json:"overlapsAfterTakeover"`
	Unattributed    int            `json:"callsNotTiedToALogLine"`
	Drained         string         `json:"settledAfterQuiet"`
	Slowest         string         `json:"slowestConvergence"`
	SlowestPVC      string         `json:"slowestConvergencePVC"`
	Violations      int            `json:"invariantViolations"`
	ViolationByKind map[string]int `json:"violationsByInvariant"`
}

func (s *soak) report(t *testing.T, violations []violation) string {
	r := report{Seed: s.cfg.Seed, Duration: s.cfg.Duration.String(), Quiet: s.cfg.QuietTime.String(), PVCs: len(s.claims),
		Namespaces: len(s.spaces), UserEdits: map[string]int{}, FaultsInjected: map[string]int{}, KubeletSteps: map[string]int{},
		Conflicts: map[string]int{}, ViolationByKind: map[string]int{}, Overlaps: s.overlapsAfterTakeover}
	r.Commit = s.commit
	for _, k := range []string{"raise", "raise-past-limit", "lower", "recover", "class", "class-rollback", "refused-edit", "touch"} {
		r.UserEdits[k] = s.chaos.count(k)
	}
	r.FaultEpochs = s.chaos.count("faults")
	r.StatefulSets, r.TemplateChanges = len(s.sets), s.chaos.count("template")
	r.Kills, r.Freezes = s.chaos.count("kill"), s.chaos.count("freeze")
	r.APIRestarts, r.EtcdRestarts, r.ResizerStarts = s.chaos.count("apiserver-restart"), s.chaos.count("etcd-restart"), s.chaos.count("resizer-exited")
	r.KubeletSteps["done"], r.KubeletSteps["infeasible"] = s.chaos.count("kubelet-done"), s.chaos.count("kubelet-infeasible")
	r.Conflicts["meddler"], r.Conflicts["kubelet"] = s.chaos.count("meddler-conflict"), s.chaos.count("kubelet-conflict")
	for i, p := range s.resizers {
		r.Conflicts[fmt.Sprintf("resizer%d-log-lines", i)] = strings.Count(p.Log(), "the object has been modified")
	}
	if n := len(s.ev.tenures); n > 0 {
		r.LeaseChanges = n - 1
	}
	for _, a := range s.ev.calls {
		if a.Method == "ControllerExpandVolume" {
			r.ExpandCalls++
		} else {
			r.ModifyCalls++
		}
		if a.Run == nil {
			r.Unattributed++
		}
		switch {
		case a.Injected:
			r.FaultsInjected[a.Method+" "+a.CodeName]++
		case a.callerCode() == "DEADLINE_EXCEEDED":
			r.FaultsInjected[a.Method+" delay past --timeout"]++
		}
	}
	var slowest time.Duration
	for _, c := range s.claims {
		n := 0
		for _, a := range s.ev.byVolume[c.Volume] {
			if a.Method == "ControllerExpandVolume" {
				n++
			}
		}
		if n > r.MaxCallsPerPVC {
			r.MaxCallsPerPVC, r.MaxCallsPVC = n, c.key()
		}
		vs := s.rec.claimVersions(c.key())
		for i := 1; i < len(vs); i++ {
			p, v := vs[i-1], vs[i]
			if v.Capacity > p.Capacity {
				r.Expansions++
			}
			if v.Allocated != 0 && p.Allocated != 0 && v.Allocated < p.Allocated {
				r.Recoveries++
			}
			if v.Current != p.Current && v.Current != "" {
				r.Modifications++
			}
		}
		if d, ok := settleTime(vs); ok && d > slowest {
			slowest, r.SlowestPVC = d, c.key()
		}
	}
	r.Slowest = slowest.Round(time.Millisecond).String()
	r.Drained = s.drained.Round(time.Second).String()
	if r.Expansions > 0 {
		r.CallsPerExpand = float64(r.ExpandCalls) / float64(r.Expansions)
	}
	r.Violations = len(violations)
	for _, v := range violations {
		r.ViolationByKind[v.Invariant]++
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.cfg.Report, append(b, '\n'), 0o644); err != nil {
		t.Errorf("writing the report %s: %v", s.cfg.Report, err)
	}
	return string(b)
}

// settleTime is how long the PVC took from the user's last edit of its request or class to its
// last write of its size, state, conditions or class (labels and annotations are not counted).
func settleTime(vs []claimVersion) (time.Duration, bool) {
	last := -1
	for i := 1; i < len(vs); i++ {
		if vs[i].Request != vs[i-1].Request || vs[i].Class != vs[i-1].Class {
			last = i
		}
	}
	if last < 0 {
		return 0, false
	}
	settled := last
	for i := last + 1; i < len(vs); i++ {
		if vs[i].Summary != vs[i-1].Summary { // not a metadata-only write
			settled = i
		}
	}
	return vs[settled].Seen.Sub(vs[last].Seen), true
}

// commit names the code under test: git describe of the checkout when the soak starts.
func commit() string {
	root, err := framework.RepoRoot()
	if err != nil {
		return "unknown"
	}
	out, err := exec.Command("git", "-C", root, "describe", "--always", "--dirty", "--abbrev=12").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
