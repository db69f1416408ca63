package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	csispec "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	clienttesting "k8s.io/client-go/testing"

	"github.com/csi-resizer/csi-resizer/pkg/controller"
	"github.com/csi-resizer/csi-resizer/pkg/features"
	"github.com/csi-resizer/csi-resizer/pkg/internal/csitest"
	"github.com/csi-resizer/csi-resizer/pkg/internal/kubetest"
)

// TestCompletedResizeCost: a resize that completes costs 3 API writes (PVC status before the
// call, PV, PVC status after), 1 event and 1 ControllerExpandVolume call; no capability call
// after start-up, no API reads besides the informers' list and watch, and its own writes are
// not processed again (DESIGN §2.6). The "slow watch" variant delivers every watch event 150ms
// late, as a loaded apiserver does: the echoes of the controller's writes then arrive after
// later writes of the same resize.
func TestCompletedResizeCost(t *testing.T) {
	for _, tc := range []struct {
		name       string
		watchDelay time.Duration
	}{
		{"prompt watch", 0},
		{"slow watch", 150 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pvc, pv := claim("data", "2Gi", "1Gi")
			e := start(t, setup{objects: objects(pvc, pv), watchDelay: tc.watchDelay})

			e.waitForClaim("data", "resized", func(p *v1.PersistentVolumeClaim) bool {
				return capacityOf(p.Status.Capacity) == "2Gi"
			})
			// Until the controller has seen the echoes of all its writes and finished whatever
			// they queued: re-processing them would show up in the counts below.
			e.settle(claimRef("data"), volumeRef("pv-data"))
			got := e.pvc("data")

			if n := len(e.csi.ExpandCalls()); n != 1 {
				t.Errorf("ControllerExpandVolume calls = %d, want 1", n)
			}
			// The PVC's add and its PV's add are both seen before the workers start, and
			// every later event is the echo of the controller's own write.
			if n := e.work.Processed(); n != 1 {
				t.Errorf("the PVC was processed %d times, want 1 (its own writes are not processed again)", n)
			}
			if n := e.csi.Count(csitest.MethodControllerGetCapabilities); n != e.startCaps {
				t.Errorf("ControllerGetCapabilities calls = %d, want only the %d of the handshake", n, e.startCaps)
			}
			req := e.csi.ExpandCalls()[0].Request
			if req.GetVolumeId() != "vol-data" || req.GetCapacityRange().GetRequiredBytes() != bytesOf("2Gi") {
				t.Errorf("request: volume %q, %d bytes; want vol-data, %d", req.GetVolumeId(), req.GetCapacityRange().GetRequiredBytes(), bytesOf("2Gi"))
			}
			if m := req.GetVolumeCapability().GetMount(); m == nil || m.GetFsType() != "ext4" ||
				req.GetVolumeCapability().GetAccessMode().GetMode() != csispec.VolumeCapability_AccessMode_SINGLE_NODE_WRITER {
				t.Errorf("request capability = %v, want mount ext4 SINGLE_NODE_WRITER", req.GetVolumeCapability())
			}

			writes := e.kube.Writes()
			var kinds []string
			for _, w := range writes {
				kinds = append(kinds, w.GetVerb()+" "+w.GetResource().Resource+"/"+w.GetSubresource())
			}
			want := []string{"patch persistentvolumeclaims/status", "patch persistentvolumes/", "patch persistentvolumeclaims/status"}
			if strings.Join(kinds, ",") != strings.Join(want, ",") {
				t.Errorf("API writes = %q, want %q", kinds, want)
			} else if p := string(writes[0].(clienttesting.PatchActionImpl).GetPatch()); !strings.Contains(p, `"resourceVersion"`) {
				t.Errorf("the write before the driver call is not guarded by resourceVersion: %s", p)
			}
			if got := e.events.Events(); len(got) != 1 || got[0].Reason != controller.EventResizeSuccessful || got[0].Type != v1.EventTypeNormal {
				t.Errorf("events = %v, want one Normal %s", got, controller.EventResizeSuccessful)
			}
			verbs := e.kube.Verbs()
			for k, n := range verbs {
				switch k {
				case "list persistentvolumeclaims", "list persistentvolumes", "watch persistentvolumeclaims", "watch persistentvolumes":
					if n != 1 {
						t.Errorf("%s: %d requests, want 1 (the informer's)", k, n)
					}
				case "patch persistentvolumeclaims/status", "patch persistentvolumes":
				default:
					t.Errorf("unexpected API request %s (%d times)", k, n)
				}
			}

			if c := capacityOf(e.pv("pv-data").Spec.Capacity); c != "2Gi" {
				t.Errorf("PV capacity = %s, want 2Gi", c)
			}
			if state(got) != "" || allocated(got) != "2Gi" || len(got.Status.Conditions) != 0 {
				t.Errorf("PVC after the resize: %s; want no state, allocated 2Gi, no conditions", describe(got))
			}
			if _, ok := got.Status.AllocatedResourceStatuses[v1.ResourceStorage]; ok {
				t.Errorf("allocatedResourceStatuses still has storage: %v", got.Status.AllocatedResourceStatuses)
			}
			for _, tr := range []struct{ from, to string }{{"none", "ControllerResizeInProgress"}, {"ControllerResizeInProgress", "none"}} {
				if v := e.metric("csi_resizer_state_transitions_total", map[string]string{"from": tr.from, "to": tr.to}); v != 1 {
					t.Errorf("csi_resizer_state_transitions_total{from=%s,to=%s} = %v, want 1", tr.from, tr.to, v)
				}
			}
			if v := e.metric("csi_resizer_expansion_duration_seconds", map[string]string{"result": "success"}); v != 1 {
				t.Errorf("csi_resizer_expansion_duration_seconds{result=success} has %v observations, want 1", v)
			}
		})
	}
}

// TestErrorCodes: every gRPC code ControllerExpandVolume can answer lands in its class, state,
// condition reason, event and metric (DESIGN §2.3 rule 6).
func TestErrorCodes(t *testing.T) {
	classes := map[codes.Code]string{
		codes.InvalidArgument: "infeasible", codes.OutOfRange: "infeasible", codes.NotFound: "infeasible",
		codes.Canceled: "transient", codes.DeadlineExceeded: "transient", codes.Unavailable: "transient",
		codes.ResourceExhausted: "transient", codes.Aborted: "transient",
	}
	for code := codes.OK; code <= codes.Unauthenticated; code++ {
		class := classes[code]
		if class == "" && code != codes.OK {
			class = "final"
		}
		t.Run(code.String(), func(t *testing.T) {
			t.Parallel()
			pvc, pv := claim("data", "2Gi", "1Gi")
			msg := fmt.Sprintf("the driver says %s", code)
			answer := csitest.Fail(code, msg)
			if code == codes.OK {
				// A gRPC server cannot answer an error with code OK: the nearest is a success
				// that says nothing about the size, which means "granted what was asked".
				answer = csitest.Response{Code: codes.OK}
			}
			// Retries are an hour away: the test sees the outcome of exactly one attempt.
			e := start(t, setup{objects: objects(pvc, pv), defaultResponse: &answer, retryStart: time.Hour, retryMax: time.Hour})

			if code == codes.OK {
				got := e.waitForClaim("data", "resized", func(p *v1.PersistentVolumeClaim) bool {
					return capacityOf(p.Status.Capacity) == "2Gi"
				})
				if state(got) != "" || allocated(got) != "2Gi" || len(got.Status.Conditions) != 0 {
					t.Errorf("PVC: %s; want done at 2Gi", describe(got))
				}
				if c := capacityOf(e.pv("pv-data").Spec.Capacity); c != "2Gi" {
					t.Errorf("PV capacity = %s, want 2Gi", c)
				}
				e.waitForEvent(controller.EventResizeSuccessful)
				if sum, _ := kubetest.MetricSum(e.reg, "csi_resizer_controller_expand_errors_total"); sum != 0 {
					t.Errorf("csi_resizer_controller_expand_errors_total = %v, want 0", sum)
				}
				return
			}

			got := e.waitForClaim("data", "an error condition", func(p *v1.PersistentVolumeClaim) bool {
				return condition(p, v1.PersistentVolumeClaimControllerResizeError) != nil
			})
			ev := e.waitForEvent(controller.EventResizeFailed)

			wantState := v1.PersistentVolumeClaimControllerResizeInProgress
			if class == "infeasible" {
				wantState = v1.PersistentVolumeClaimControllerResizeInfeasible
			}
			if state(got) != wantState {
				t.Errorf("state = %q, want %q", state(got), wantState)
			}
			if allocated(got) != "2Gi" {
				t.Errorf("allocatedResources = %s, want 2Gi", allocated(got))
			}
			cond := condition(got, v1.PersistentVolumeClaimControllerResizeError)
			if cond.Status != v1.ConditionTrue || cond.Reason != code.String() || cond.Message != msg {
				t.Errorf("condition = %s/%s %q, want True/%s %q", cond.Status, cond.Reason, cond.Message, code, msg)
			}
			if capacityOf(got.Status.Capacity) != "1Gi" || capacityOf(e.pv("pv-data").Spec.Capacity) != "1Gi" {
				t.Errorf("capacity changed after a failure: PVC %s, PV %s", capacityOf(got.Status.Capacity), capacityOf(e.pv("pv-data").Spec.Capacity))
			}
			if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Message, msg) {
				t.Errorf("event = %v, want a Warning carrying %q", ev, msg)
			}
			if v := e.metric("csi_resizer_controller_expand_errors_total", map[string]string{"grpc_code": code.String(), "class": class}); v != 1 {
				t.Errorf("csi_resizer_controller_expand_errors_total{grpc_code=%s,class=%s} = %v, want 1", code, class, v)
			}
			if sum, _ := kubetest.MetricSum(e.reg, "csi_resizer_controller_expand_errors_total"); sum != 1 {
				t.Errorf("csi_resizer_controller_expand_errors_total summed over all labels = %v, want 1", sum)
			}
			if n := len(e.csi.ExpandCalls()); n != 1 {
				t.Errorf("ControllerExpandVolume calls = %d, want 1", n)
			}
		})
	}
}

// TestNodeExpansionRequired: the driver grew the volume and needs the node: NodeResizePending,
// FileSystemResizePending and the pre-resize capacity annotation (AnnotateFsResize).
func TestNodeExpansionRequired(t *testing.T) {
	for _, annotate := range []bool{true, false} {
		t.Run(fmt.Sprintf("AnnotateFsResize=%v", annotate), func(t *testing.T) {
			t.Parallel()
			pvc, pv := claim("data", "2Gi", "1Gi")
			answer := csitest.Response{Code: codes.OK, Grant: true, NodeExpansionRequired: true}
			e := start(t, setup{objects: objects(pvc, pv), defaultResponse: &answer, noAnnotate: !annotate})

			got := e.waitForClaim("data", "NodeResizePending", func(p *v1.PersistentVolumeClaim) bool {
				return state(p) == v1.PersistentVolumeClaimNodeResizePending
			})
			ev := e.waitForEvent(controller.EventFileSystemRequired)
			if ev.Type != v1.EventTypeNormal {
				t.Errorf("event = %v, want Normal", ev)
			}
			if allocated(got) != "2Gi" || capacityOf(got.Status.Capacity) != "1Gi" {
				t.Errorf("PVC: %s; want allocated 2Gi and capacity still 1Gi", describe(got))
			}
			if c := condition(got, v1.PersistentVolumeClaimFileSystemResizePending); c == nil || c.Status != v1.ConditionTrue {
				t.Errorf("no FileSystemResizePending condition: %s", describe(got))
			}
			if condition(got, v1.PersistentVolumeClaimResizing) != nil || condition(got, v1.PersistentVolumeClaimControllerResizeError) != nil {
				t.Errorf("resize conditions left: %s", describe(got))
			}
			vol := e.pv("pv-data")
			if c := capacityOf(vol.Spec.Capacity); c != "2Gi" {
				t.Errorf("PV capacity = %s, want 2Gi", c)
			}
			ann, ok := vol.Annotations[features.AnnPreResizeCapacity]
			if annotate && ann != "1Gi" {
				t.Errorf("PV annotation %s = %q, want 1Gi", features.AnnPreResizeCapacity, ann)
			}
			if !annotate && ok {
				t.Errorf("PV annotation %s = %q with AnnotateFsResize off", features.AnnPreResizeCapacity, ann)
			}
			if n := len(e.csi.ExpandCalls()); n != 1 {
				t.Errorf("ControllerExpandVolume calls = %d, want 1", n)
			}
			if n := len(e.kube.Writes()); n != 3 {
				t.Errorf("API writes = %d, want 3", n)
			}
		})
	}
}

// TestNodeOnlyDriver: a driver without controller EXPAND_VOLUME gets no CSI call; the PV
// capacity is set and the node takes over.
func TestNodeOnlyDriver(t *testing.T) {
	pvc, pv := claim("data", "2Gi", "1Gi")
	e := start(t, setup{
		driver:  csitest.Options{PluginExpansion: csispec.PluginCapability_VolumeExpansion_ONLINE},
		objects: objects(pvc, pv),
	})
	if !e.driver.NodeOnly() {
		t.Fatalf("handshake: %+v, want a node-only driver", e.driver)
	}
	got := e.waitForClaim("data", "NodeResizePending", func(p *v1.PersistentVolumeClaim) bool {
		return state(p) == v1.PersistentVolumeClaimNodeResizePending
	})
	e.waitForEvent(controller.EventFileSystemRequired)
	if allocated(got) != "2Gi" || condition(got, v1.PersistentVolumeClaimFileSystemResizePending) == nil {
		t.Errorf("PVC: %s; want allocated 2Gi with FileSystemResizePending", describe(got))
	}
	if c := capacityOf(e.pv("pv-data").Spec.Capacity); c != "2Gi" {
		t.Errorf("PV capacity = %s, want 2Gi", c)
	}
	if n := e.csi.Count(csitest.MethodControllerExpandVolume); n != 0 {
		t.Errorf("ControllerExpandVolume calls = %d, want 0", n)
	}
	if n := len(e.kube.Writes()); n != 2 {
		t.Errorf("API writes = %d, want 2 (PV, PVC status)", n)
	}
}
