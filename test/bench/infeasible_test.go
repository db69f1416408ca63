//go:build integration

package bench

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// InfeasibleRun is the cost of one PVC whose expansion the driver rejects as infeasible.
type InfeasibleRun struct {
	Binary             string  `json:"binary"`
	RetryIntervalMax   float64 `json:"retryIntervalMaxSeconds"`
	RetryIntervalStart float64 `json:"retryIntervalStartSeconds"`
	WindowSeconds      float64 `json:"windowSeconds"`
	// Calls are the ControllerExpandVolume calls in the window; Target = 1 + window/max.
	Calls  int `json:"calls"`
	Target int `json:"target"`
	// OtherCSICalls are driver calls of other methods in the window.
	OtherCSICalls int `json:"otherCsiCalls"`
	// CallOffsets are the calls' arrival times after the request change, GapsSeconds the time
	// between consecutive calls: the first gap shows whether the slow retry starts at the
	// first failure.
	CallOffsets []float64 `json:"callOffsetsSeconds"`
	GapsSeconds []float64 `json:"gapsSeconds"`
	// API writes in the window.
	Requests Requests `json:"requests"`
	// What the PVC shows at the end of the window: allocatedResourceStatuses[storage] and the
	// ControllerResizeError condition's reason and message.
	State            string `json:"state"`
	ConditionReason  string `json:"conditionReason"`
	ConditionMessage string `json:"conditionMessage"`
	// RecoverySeconds: after the window the request is lowered to recoverySize (KEP-1790
	// recovery: above the capacity, below the infeasible size); the time until the PVC's
	// capacity is that size, or -1 when it was not within recoveryTimeout.
	RecoverySeconds float64 `json:"recoverySeconds"`
	RecoveredTo     string  `json:"recoveredTo"`
}

// recoverySize is what the request is lowered to after the infeasible window.
const recoverySize = "3Gi"

// recoveryTimeout bounds the wait for the recovery: one slow retry plus slack.
func recoveryTimeout(retryMax time.Duration) time.Duration { return retryMax + time.Minute }

// infeasibleConfigs: (retry-interval-max, window). The second is upstream's measured setting.
func infeasibleConfigs() [][2]time.Duration {
	cfgs := [][2]time.Duration{{3 * time.Second, 18 * time.Second}}
	if !smoke {
		cfgs = append(cfgs, [2]time.Duration{30 * time.Second, 180 * time.Second})
	}
	return cfgs
}

func BenchmarkInfeasible(b *testing.B) {
	bins := []binary{binaries(b)[0]}
	if up, ok := upstreamBinary(b); ok {
		bins = append(bins, up)
	}
	for _, cfg := range infeasibleConfigs() {
		for _, bin := range bins {
			b.Run(fmt.Sprintf("%s/retry-max=%v/window=%v", bin.Label, cfg[0], cfg[1]), func(b *testing.B) {
				r := runInfeasible(b, bin, cfg[0], cfg[1])
				report.addInfeasible(r)
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(r.Calls), "driver-calls")
				b.ReportMetric(float64(r.Target), "target-calls")
			})
		}
	}
}

func runInfeasible(b *testing.B, bin binary, retryMax, window time.Duration) InfeasibleRun {
	big := resource.MustParse("100Gi")
	e := scenario.Start(b, scenario.Options{AdminResizer: true, NoResizer: true, Mock: framework.MockDriverOptions{
		Faults: []framework.Fault{{
			Method: "ControllerExpandVolume", Code: codes.OutOfRange,
			Message: "the pool has no room for 100Gi", MinRequiredBytes: big.Value(),
		}},
	}})
	e.NewClaim(b, "data", "1Gi")
	p, _ := startResizer(b, e, bin, e.Driver, 1, "--retry-interval-max="+retryMax.String())
	before := scrapeAPIServer(b, e.Ctx, e.Cluster)

	t0 := time.Now()
	e.SetRequest(b, "data", big.String())
	// Observe the whole window (polling the calls log as the calls arrive), then count.
	end := t0.Add(window)
	pollUntil(window+time.Second, 500*time.Millisecond, func() bool { return time.Now().After(end) })
	after := scrapeAPIServer(b, e.Ctx, e.Cluster)

	r := InfeasibleRun{
		Binary: bin.Label, RetryIntervalMax: retryMax.Seconds(), RetryIntervalStart: 1, WindowSeconds: window.Seconds(),
		Target: 1 + int(window/retryMax),
	}
	var last time.Time
	for _, c := range callsSince(b, e.Driver, t0) {
		if c.Time.After(end) {
			continue
		}
		if c.Method != "ControllerExpandVolume" {
			r.OtherCSICalls++
			continue
		}
		r.Calls++
		r.CallOffsets = append(r.CallOffsets, seconds(c.Time.Sub(t0)))
		if !last.IsZero() {
			r.GapsSeconds = append(r.GapsSeconds, seconds(c.Time.Sub(last)))
		}
		last = c.Time
	}
	own := map[apiKey]int{{Verb: "PATCH", Resource: "persistentvolumeclaims"}: 1}
	r.Requests = classify(after.minus(before), own)
	r.State, r.ConditionReason, r.ConditionMessage = infeasibleState(e.PVC(b, "data"))
	r.RecoveredTo, r.RecoverySeconds = recoverySize, recoverClaim(b, e, retryMax)
	b.Logf("%s: %d ControllerExpandVolume calls in %v at --retry-interval-max %v (target <= %d); at %v s, gaps %v s; %d other CSI calls; API: %d PVC status writes, %d events; state %s, condition reason %q message %q; recovered to %s in %.1fs",
		bin.Label, r.Calls, window, retryMax, r.Target, r.CallOffsets, r.GapsSeconds, r.OtherCSICalls, r.Requests.PVCStatusWrites, r.Requests.EventWrites,
		r.State, r.ConditionReason, r.ConditionMessage, r.RecoveredTo, r.RecoverySeconds)
	if err := p.Stop(); err != nil {
		b.Logf("stopping the resizer: %v", err)
	}
	return r
}

// infeasibleState is the PVC's resize state and its ControllerResizeError condition.
func infeasibleState(pvc *v1.PersistentVolumeClaim) (state, reason, message string) {
	state = string(pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage])
	for _, c := range pvc.Status.Conditions {
		if c.Type == v1.PersistentVolumeClaimControllerResizeError {
			reason, message = c.Reason, c.Message
		}
	}
	return state, reason, message
}

// recoverClaim lowers the request of the infeasible PVC to recoverySize and returns the seconds
// until its capacity is that size, -1 if it was not within recoveryTimeout.
func recoverClaim(b *testing.B, e *scenario.Env, retryMax time.Duration) float64 {
	want := resource.MustParse(recoverySize)
	t0 := time.Now()
	e.SetRequest(b, "data", recoverySize)
	done := pollUntil(recoveryTimeout(retryMax), 100*time.Millisecond, func() bool {
		c := e.PVC(b, "data").Status.Capacity[v1.ResourceStorage]
		return c.Cmp(want) == 0
	})
	if !done {
		return -1
	}
	return seconds(time.Since(t0))
}
