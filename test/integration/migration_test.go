//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-resizer/csi-resizer/pkg/expand"
	"github.com/csi-resizer/csi-resizer/pkg/migration"
	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

const ebsDriver = "ebs.csi.aws.com"

// newEBSClaim creates a bound PVC whose PV is an in-tree awsElasticBlockStore volume with
// volumeID, as a cluster that started before CSI migration has them; handed sets the PVC's
// storage-resizer annotation to the EBS CSI driver (what kube-controller-manager does when the
// user raises the request).
func newEBSClaim(t *testing.T, e *scenario.Env, name, volumeID, size string, handed bool) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	t.Helper()
	var ann map[string]string
	if handed {
		ann = map[string]string{migration.AnnStorageResizer: ebsDriver}
	}
	src := v1.PersistentVolumeSource{AWSElasticBlockStore: &v1.AWSElasticBlockStoreVolumeSource{VolumeID: volumeID, FSType: "xfs"}}
	return framework.CreateBoundClaimWithSource(t, e.Ctx, e.Client, e.Namespace, name, e.Driver.Name, src, size, e.StorageClass, ann)
}

// callRequest is what the test reads of a ControllerExpandVolume request in the mock's log.
type callRequest struct {
	VolumeCapability struct {
		Mount struct {
			FsType string `json:"fsType"`
		} `json:"mount"`
	} `json:"volumeCapability"`
}

// TestMigratedInTreeVolume: a driver named ebs.csi.aws.com expands awsElasticBlockStore PVs
// whose PVCs the storage-resizer annotation hands to it, through the same KEP-1790 state
// machine: the driver gets the translated volume id and fsType, the new capacity is written on
// the in-tree PV, an infeasible size is recorded and recovered from, a PVC is picked up by the
// update that adds the annotation, and the call metrics carry migrated="true".
func TestMigratedInTreeVolume(t *testing.T) {
	e := startMock(t, scenario.Options{
		Mock:        framework.MockDriverOptions{Name: ebsDriver},
		ResizerArgs: []string{"--retry-interval-start=200ms", "--retry-interval-max=3s"},
	})
	if e.Driver.Name != ebsDriver {
		t.Fatalf("driver is named %q, want %q", e.Driver.Name, ebsDriver)
	}
	id, err := e.Driver.CreateVolume(e.Ctx, e.Namespace+"-data", bytesOf("1Gi"))
	if err != nil {
		t.Fatal(err)
	}
	_, pv := newEBSClaim(t, e, "data", id, "1Gi", true)

	// Expansion.
	e.SetRequest(t, "data", "2Gi")
	pvc := e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	if got := pvc.Annotations[expand.AnnNodeExpansionNotRequired]; got != "true" {
		t.Errorf("node-expansion-not-required = %q after an expansion without a node step, want \"true\"", got)
	}
	gotPV := e.PV(t, pv.Name)
	if c := gotPV.Spec.Capacity[v1.ResourceStorage]; !scenario.Is(c, "2Gi") || gotPV.Spec.AWSElasticBlockStore == nil || gotPV.Spec.CSI != nil {
		t.Errorf("PV: capacity %s, source %+v; want 2Gi written on the in-tree source", c.String(), gotPV.Spec.PersistentVolumeSource)
	}
	calls := e.Driver.VolumeCalls(t, id)
	if len(calls) != 1 {
		t.Fatalf("ControllerExpandVolume calls for %s: %s, want 1", id, framework.DescribeCalls(calls))
	}
	var req callRequest
	if err := json.Unmarshal(calls[0].Request, &req); err != nil || req.VolumeCapability.Mount.FsType != "xfs" {
		t.Errorf("the call's volume capability %s: want the in-tree fsType xfs (err %v)", calls[0].Request, err)
	}

	// An infeasible size, and the recovery to a smaller one (KEP-1790).
	e.Driver.SetFaults(t, []framework.Fault{{Method: "ControllerExpandVolume", Code: codes.OutOfRange, Message: "too big", MinRequiredBytes: bytesOf("10Gi")}})
	e.SetRequest(t, "data", "50Gi")
	pvc = e.WaitClaim(t, "data", resizeTimeout, scenario.InState(v1.PersistentVolumeClaimControllerResizeInfeasible))
	if _, ok := pvc.Annotations[expand.AnnNodeExpansionNotRequired]; ok {
		t.Errorf("node-expansion-not-required still there after a new step started: %v", pvc.Annotations)
	}
	e.SetRequest(t, "data", "3Gi")
	pvc = e.WaitClaim(t, "data", resizeTimeout, scenario.Done("3Gi"))
	if _, _, alloc := scenario.Storage(pvc); !scenario.Is(alloc, "3Gi") {
		t.Errorf("allocatedResources = %s after the recovery, want 3Gi", alloc.String())
	}
	if got := pvc.Annotations[expand.AnnNodeExpansionNotRequired]; got != "true" {
		t.Errorf("node-expansion-not-required = %q after the recovery, want \"true\"", got)
	}
	if c := e.PV(t, pv.Name).Spec.Capacity[v1.ResourceStorage]; !scenario.Is(c, "3Gi") {
		t.Errorf("in-tree PV capacity = %s after the recovery, want 3Gi", c.String())
	}
	e.Driver.ClearFaults(t)

	// The translation: an aws:// URL reaches the driver as the bare EBS volume id. (The mock
	// does not know that volume and answers NOT_FOUND; what matters is the id it received.)
	_, _ = newEBSClaim(t, e, "url", "aws://us-east-1a/vol-0123456789abcdef0", "1Gi", true)
	e.SetRequest(t, "url", "2Gi")
	framework.Eventually(t, resizeTimeout, func() (bool, string) {
		got := e.Driver.VolumeCalls(t, "vol-0123456789abcdef0")
		return len(got) > 0, "no ControllerExpandVolume call with the translated id vol-0123456789abcdef0; calls: " + describeIDs(e.Driver.Calls(t, "ControllerExpandVolume"))
	})

	// Not handed over yet: left alone, until the update that adds the annotation.
	lateID, err := e.Driver.CreateVolume(e.Ctx, e.Namespace+"-late", bytesOf("1Gi"))
	if err != nil {
		t.Fatal(err)
	}
	newEBSClaim(t, e, "late", lateID, "1Gi", false)
	e.SetRequest(t, "late", "2Gi")
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		n := len(e.Driver.VolumeCalls(t, lateID))
		return n == 0 && scenario.State(e.PVC(t, "late")) == "", fmt.Sprintf("%d calls, state %q for a PVC without the annotation", n, scenario.State(e.PVC(t, "late")))
	})
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{migration.AnnStorageResizer: ebsDriver}}})
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).Patch(e.Ctx, "late", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.WaitClaim(t, "late", resizeTimeout, scenario.Done("2Gi"))

	// Upstream's metrics for a migrated driver: every call sample says whether it was about a
	// translated in-tree volume.
	body := scenario.Scrape(t, e.Resizer)
	method := `method_name="/csi.v1.Controller/ControllerExpandVolume"`
	if n := scenario.MetricValue(body, "csi_sidecar_operations_seconds_count", method, `migrated="true"`); n < 4 {
		t.Errorf("csi_sidecar_operations_seconds_count{ControllerExpandVolume, migrated=\"true\"} = %v, want >= 4 (2 expansions, the infeasible call, the URL's call)", n)
	}
	if n := scenario.MetricValue(body, "csi_sidecar_operations_seconds_count", method, `migrated="false"`); n != 0 {
		t.Errorf("%v ControllerExpandVolume samples with migrated=\"false\": every call here was about an in-tree PV", n)
	}
}

func describeIDs(calls []framework.Call) string {
	var ids []string
	for _, c := range calls {
		ids = append(ids, c.VolumeID)
	}
	return "[" + strings.Join(ids, " ") + "]"
}

// TestUpstreamAnnotations: the annotations other components read, on the real apiserver.
// pre-resize-capacity (AnnotateFsResize) is written with the PV's new capacity only when absent,
// holding the PVC's status.capacity from before, and removed once the node is done;
// node-expansion-not-required is removed by the write that starts a step and stays away when
// the expansion is handed to the node.
func TestUpstreamAnnotations(t *testing.T) {
	e := startMock(t, scenario.Options{Mock: framework.MockDriverOptions{NodeExpansionRequired: true}})
	_, pv := e.NewClaim(t, "data", "1Gi")

	// A claim that finished an expansion without the node last time carries
	// node-expansion-not-required; the next expansion's first write takes it away.
	setAnnotation(t, e, "data", expand.AnnNodeExpansionNotRequired, "true")
	e.SetRequest(t, "data", "2Gi")
	pvc := e.WaitClaim(t, "data", resizeTimeout, scenario.InState(v1.PersistentVolumeClaimNodeResizePending))
	if _, ok := pvc.Annotations[expand.AnnNodeExpansionNotRequired]; ok {
		t.Errorf("node-expansion-not-required kept on a PVC handed to the node: %v", pvc.Annotations)
	}
	if got := e.PV(t, pv.Name).Annotations[expand.AnnPreResizeCapacity]; got != "1Gi" {
		t.Errorf("pre-resize-capacity = %q, want the PVC's status.capacity before the expansion, 1Gi", got)
	}
	e.FinishNodeExpansion(t, "data")
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	waitPVAnnotation(t, e, pv.Name, expand.AnnPreResizeCapacity, "", "removed once the node finished")

}

// TestPreResizeCapacityClaimDeleted: a claim deleted right after its node step, before the
// resizer saw that step end, leaves its PV (Retain) without pre-resize-capacity (docs/design.md
// §2.9); a claim deleted before its node step leaves the annotation, which still holds the size
// the file system has. The resizer is frozen (SIGSTOP) across the kubelet's write and the
// delete, so it sees both at once when thawed, as after a slow sync.
func TestPreResizeCapacityClaimDeleted(t *testing.T) {
	e := startMock(t, scenario.Options{Mock: framework.MockDriverOptions{NodeExpansionRequired: true}})
	_, donePV := e.NewClaim(t, "done", "1Gi")
	_, pendingPV := e.NewClaim(t, "pending", "1Gi")
	for _, name := range []string{"done", "pending"} {
		e.SetRequest(t, name, "2Gi")
		e.WaitClaim(t, name, resizeTimeout, scenario.InState(v1.PersistentVolumeClaimNodeResizePending))
	}
	waitPVAnnotation(t, e, donePV.Name, expand.AnnPreResizeCapacity, "1Gi", "written with the node step")
	if err := e.Resizer.Freeze(); err != nil {
		t.Fatal(err)
	}
	e.FinishNodeExpansion(t, "done")
	framework.DeleteClaim(t, e.Ctx, e.Client, e.Namespace, "done")
	framework.DeleteClaim(t, e.Ctx, e.Client, e.Namespace, "pending")
	if err := e.Resizer.Thaw(); err != nil {
		t.Fatal(err)
	}
	waitPVAnnotation(t, e, donePV.Name, expand.AnnPreResizeCapacity, "", "removed: its claim was deleted after the node step")
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		got := e.PV(t, pendingPV.Name).Annotations[expand.AnnPreResizeCapacity]
		return got == "1Gi", fmt.Sprintf("pre-resize-capacity of the PV whose claim was deleted before its node step = %q, want 1Gi kept", got)
	})
}

// TestPreResizeCapacityKeptUntilNodeDone: a pre-resize-capacity annotation already on the PV
// while the node has not finished is kept by the next PV write (upstream writes it only when
// absent: it holds the size the file system really has), and removed once the node is done.
// A node-only driver whose node step failed for good and whose request was lowered (KEP-1790
// Case 2) writes the PV again before the node ever finished.
func TestPreResizeCapacityKeptUntilNodeDone(t *testing.T) {
	e := startMock(t, scenario.Options{Mock: framework.MockDriverOptions{NodeOnly: true}})
	_, pv := e.NewClaim(t, "data", "1Gi")
	e.SetRequest(t, "data", "5Gi")
	e.WaitClaim(t, "data", resizeTimeout, scenario.InState(v1.PersistentVolumeClaimNodeResizePending))
	if got := e.PV(t, pv.Name).Annotations[expand.AnnPreResizeCapacity]; got != "1Gi" {
		t.Fatalf("pre-resize-capacity = %q, want 1Gi", got)
	}
	// A distinct value, so that a rewrite (with status.capacity, 1Gi) would show.
	setPVAnnotation(t, e, pv.Name, expand.AnnPreResizeCapacity, "1000Mi")
	e.FailNodeExpansion(t, "data")
	e.SetRequest(t, "data", "2Gi")
	e.WaitClaim(t, "data", resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, _, alloc := scenario.Storage(pvc)
		return scenario.State(pvc) == v1.PersistentVolumeClaimNodeResizePending && scenario.Is(alloc, "2Gi"), "want NodeResizePending at 2Gi"
	})
	got := e.PV(t, pv.Name)
	if c := got.Spec.Capacity[v1.ResourceStorage]; !scenario.Is(c, "2Gi") || got.Annotations[expand.AnnPreResizeCapacity] != "1000Mi" {
		t.Errorf("PV: capacity %s, pre-resize-capacity %q; want 2Gi and the 1000Mi that was there", c.String(), got.Annotations[expand.AnnPreResizeCapacity])
	}
	e.FinishNodeExpansion(t, "data")
	e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	waitPVAnnotation(t, e, pv.Name, expand.AnnPreResizeCapacity, "", "removed once the node finished")
}

// TestNodeExpansionNotRequiredWithoutNodeStep: without a node step there is no
// pre-resize-capacity at all, and the PVC gets node-expansion-not-required in the status write
// that finishes the expansion: the apiserver takes it through the status subresource, so it
// costs no write of the PVC itself.
func TestNodeExpansionNotRequiredWithoutNodeStep(t *testing.T) {
	e := startMock(t, scenario.Options{})
	_, pv := e.NewClaim(t, "data", "1Gi")

	e.SetRequest(t, "data", "2Gi")
	pvc := e.WaitClaim(t, "data", resizeTimeout, scenario.Done("2Gi"))
	if got := pvc.Annotations[expand.AnnNodeExpansionNotRequired]; got != "true" {
		t.Errorf("node-expansion-not-required = %q, want \"true\"", got)
	}
	if _, ok := e.PV(t, pv.Name).Annotations[expand.AnnPreResizeCapacity]; ok {
		t.Error("pre-resize-capacity written for an expansion without a node step")
	}
	viaStatus := false
	for _, f := range pvc.ManagedFields {
		if f.Manager != "csi-resizer" {
			continue
		}
		if f.Subresource != "status" {
			t.Errorf("csi-resizer wrote the PVC itself (managedFields %s), want status writes only", f.FieldsV1.String())
		}
		if f.FieldsV1 != nil && strings.Contains(string(f.FieldsV1.Raw), `"f:`+expand.AnnNodeExpansionNotRequired+`"`) {
			viaStatus = true
		}
	}
	if !viaStatus {
		t.Errorf("the annotation is not among csi-resizer's status fields: %+v", pvc.ManagedFields)
	}
}

// TestNodeExpansionNotRequiredLegacyMode: upstream's legacy path
// (RecoverVolumeExpansionFailure=false) never writes the annotation, nor does ours.
func TestNodeExpansionNotRequiredLegacyMode(t *testing.T) {
	e := startMock(t, scenario.Options{ResizerArgs: []string{"--feature-gates=RecoverVolumeExpansionFailure=false"}})
	e.NewClaim(t, "data", "1Gi")
	e.SetRequest(t, "data", "2Gi")
	e.WaitClaim(t, "data", resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		c := pvc.Status.Capacity[v1.ResourceStorage]
		return scenario.Is(c, "2Gi"), "want status.capacity 2Gi"
	})
	if got, ok := e.PVC(t, "data").Annotations[expand.AnnNodeExpansionNotRequired]; ok {
		t.Errorf("node-expansion-not-required = %q in legacy mode, want none", got)
	}
}

func setAnnotation(t *testing.T, e *scenario.Env, claim, key, value string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).Patch(e.Ctx, claim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func setPVAnnotation(t *testing.T, e *scenario.Env, pv, key, value string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if _, err := e.Client.CoreV1().PersistentVolumes().Patch(e.Ctx, pv, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitPVAnnotation waits until the PV's annotation key has value ("" = absent).
func waitPVAnnotation(t *testing.T, e *scenario.Env, pv, key, value, what string) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		got, ok := e.PV(t, pv).Annotations[key]
		if value == "" {
			return !ok, fmt.Sprintf("%s: %s = %q, want it %s", pv, key, got, what)
		}
		return got == value, fmt.Sprintf("%s: %s = %q, want %q (%s)", pv, key, got, value, what)
	})
}

// TestMigratedInTreeModify: VolumeAttributesClass modification of an awsElasticBlockStore PV
// handed to the EBS CSI driver (docs/design.md §2.8, §2.11) end to end: the driver gets the
// volume id and the class's parameters in one call, the PVC's current class follows, the
// in-tree PV is left as it is (the apiserver refuses volumeAttributesClassName on a PV without
// spec.csi: writing it failed and repeated the call for ever, docs/design.md §2.11 rule 21),
// and the call metrics carry migrated="true".
func TestMigratedInTreeModify(t *testing.T) {
	e := startMock(t, scenario.Options{Mock: framework.MockDriverOptions{Name: ebsDriver, ModifyVolume: true}})
	io2 := map[string]string{"type": "io2", "iops": "4000"}
	e.CreateClass(t, "io2", io2)
	id, err := e.Driver.CreateVolume(e.Ctx, e.Namespace+"-data", bytesOf("1Gi"))
	if err != nil {
		t.Fatal(err)
	}
	_, pv := newEBSClaim(t, e, "data", id, "1Gi", true)

	e.SetClass(t, "data", "io2")
	e.WaitClaim(t, "data", modifyTimeout, scenario.ModifiedTo("io2"))
	wantModifyCalls(t, e.Driver.ModifyCalls(t, id), modifyCall{params: io2, code: codes.OK})
	got := e.PV(t, pv.Name)
	if c := got.Spec.VolumeAttributesClassName; c != nil || got.Spec.AWSElasticBlockStore == nil || got.Spec.CSI != nil {
		t.Errorf("PV: class %v, source %+v; want the in-tree PV as it was", c, got.Spec.PersistentVolumeSource)
	}
	framework.Consistently(t, 3*time.Second, func() (bool, string) {
		n := len(e.Driver.ModifyCalls(t, id))
		return n == 1, fmt.Sprintf("%d ControllerModifyVolume calls after the modification was recorded, want 1", n)
	})
	body := scenario.Scrape(t, e.Resizer)
	method := `method_name="/csi.v1.Controller/ControllerModifyVolume"`
	if n := scenario.MetricValue(body, "csi_sidecar_operations_seconds_count", method, `migrated="true"`); n != 1 {
		t.Errorf("csi_sidecar_operations_seconds_count{ControllerModifyVolume, migrated=\"true\"} = %v, want 1", n)
	}
}
