//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// The VolumeAttributesClass part of the suite's environment. A driver that does not advertise
// the controller MODIFY_VOLUME capability skips TestModifyVolumeAttributesClass, unless
// E2E_MODIFY_REQUIRED=true says it must modify (make test-e2e-hostpath's run with
// --enable-controller-modify-volume): then the missing capability fails the test, so a
// misconfigured run cannot pass by skipping.
const (
	envModifyRequired = "E2E_MODIFY_REQUIRED"
	// envModifyParameters are the parameters of a class the driver accepts, "k=v,k2=v2";
	// envModifyInfeasible those of a class it refuses with INVALID_ARGUMENT (csi-driver-host-path:
	// a parameter name outside --accepted-mutable-parameter-names). Both are required to
	// modify a real driver; the mock defaults to the values below and refuses the second class
	// by fault injection.
	envModifyParameters    = "E2E_MODIFY_PARAMETERS"
	envModifyInfeasible    = "E2E_MODIFY_INFEASIBLE_PARAMETERS"
	defaultModifyParams    = "iops=3000,throughput=125"
	defaultInfeasibleModif = "tier=gold"
)

// modifySuite is the VolumeAttributesClass configuration configureModify reads.
var modifySuite struct {
	required              bool
	accepted, infeasible  map[string]string
	acceptedSet, refusSet bool // given in the environment (not the mock's defaults)
}

// configureModify reads the VolumeAttributesClass variables (called by configure).
func configureModify() error {
	if v := os.Getenv(envModifyRequired); v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s=%q: %v", envModifyRequired, v, err)
		}
		modifySuite.required = on
	}
	var err error
	if modifySuite.accepted, modifySuite.acceptedSet, err = parametersFromEnv(envModifyParameters, defaultModifyParams); err != nil {
		return err
	}
	if modifySuite.infeasible, modifySuite.refusSet, err = parametersFromEnv(envModifyInfeasible, defaultInfeasibleModif); err != nil {
		return err
	}
	if modifySuite.required && suite.external && (!modifySuite.acceptedSet || !modifySuite.refusSet) {
		return fmt.Errorf("%s=true with a real driver needs %s (class parameters it accepts, e.g. iops=3000) and %s (parameters it refuses with INVALID_ARGUMENT, e.g. tier=gold)",
			envModifyRequired, envModifyParameters, envModifyInfeasible)
	}
	return nil
}

// parametersFromEnv parses "k=v,k2=v2" from env, or def when env is unset.
func parametersFromEnv(env, def string) (map[string]string, bool, error) {
	s, set := os.LookupEnv(env)
	if !set || s == "" {
		s, set = def, false
	}
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, false, fmt.Errorf("%s=%q: want key=value[,key=value...]", env, s)
		}
		out[k] = v
	}
	return out, set, nil
}

// modifyTimeout bounds each wait of the modification scenario.
const modifyTimeout = time.Minute

// TestModifyVolumeAttributesClass: KEP-3751 on the driver under test. A class the driver
// accepts is applied (the PV names it, the PVC says it is current); a class it refuses with
// INVALID_ARGUMENT leaves the PVC Infeasible with the volume untouched; setting the PVC back to
// the current class cancels that without another call.
func TestModifyVolumeAttributesClass(t *testing.T) {
	mockFault := framework.Fault{Method: "ControllerModifyVolume", Code: codes.InvalidArgument,
		Message: "mutable parameter " + firstKey(modifySuite.infeasible) + " is not supported", MutableParameter: firstKey(modifySuite.infeasible)}
	e := start(t, scenario.Options{Mock: framework.MockDriverOptions{ModifyVolume: true}})
	if !driverModifies(t, e) {
		if modifySuite.required {
			t.Fatalf("driver %s does not advertise the controller MODIFY_VOLUME capability, and %s=true says it must (csi-driver-host-path: --enable-controller-modify-volume)", e.Driver.Name, envModifyRequired)
		}
		t.Skipf("driver %s does not advertise MODIFY_VOLUME: no VolumeAttributesClass modification to test", e.Driver.Name)
	}
	if !e.Driver.IsMock() && (!modifySuite.acceptedSet || !modifySuite.refusSet) {
		t.Skipf("driver %s advertises MODIFY_VOLUME: set %s and %s to the class parameters it accepts and refuses to test it", e.Driver.Name, envModifyParameters, envModifyInfeasible)
	}
	if e.Driver.IsMock() {
		e.Driver.SetFaults(t, mockFaults(mockFault))
	}
	fast := createClass(t, e, "fast-"+e.Namespace, modifySuite.accepted)
	refused := createClass(t, e, "refused-"+e.Namespace, modifySuite.infeasible)
	_, pv := e.NewClaim(t, "data", "1Gi")

	// A class the driver accepts.
	setClass(t, e, "data", fast)
	pvc := e.WaitClaim(t, "data", modifyTimeout, modified(fast))
	if got := e.PV(t, pv.Name).Spec.VolumeAttributesClassName; got == nil || *got != fast {
		t.Errorf("PV %s volumeAttributesClassName = %v, want %s", pv.Name, str(got), fast)
	}
	noModifyConditions(t, pvc)
	if ev := e.WaitEvent(t, "data", "VolumeModifySuccessful", 30*time.Second); !strings.Contains(ev.Message, fast) {
		t.Errorf("VolumeModifySuccessful should name the class %s: %q", fast, ev.Message)
	}
	if n := modifyCalls(t, e.Resizer); n != 1 {
		t.Errorf("the resizer made %v ControllerModifyVolume calls for one modification, want 1", n)
	}
	if e.Driver.IsMock() {
		calls := e.Driver.ModifyCalls(t, pv.Spec.CSI.VolumeHandle)
		if len(calls) != 1 || !sameParameters(calls[0].MutableParameters, modifySuite.accepted) {
			t.Errorf("the driver's ControllerModifyVolume calls = %+v, want one with the class parameters %v", calls, modifySuite.accepted)
		}
	}

	// A class the driver refuses: Infeasible, the volume keeps the class it has.
	setClass(t, e, "data", refused)
	pvc = e.WaitClaim(t, "data", modifyTimeout, modifyStatus(v1.PersistentVolumeClaimModifyVolumeInfeasible, refused))
	if c := scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyVolumeError); c == nil || c.Reason != codes.InvalidArgument.String() || c.Message == "" {
		t.Errorf("ModifyVolumeError condition = %+v, want reason %s with the driver's message", c, codes.InvalidArgument)
	}
	if cur := pvc.Status.CurrentVolumeAttributesClassName; cur == nil || *cur != fast {
		t.Errorf("currentVolumeAttributesClassName = %v while the driver refused %s, want %s", str(cur), refused, fast)
	}
	if got := e.PV(t, pv.Name).Spec.VolumeAttributesClassName; got == nil || *got != fast {
		t.Errorf("PV %s volumeAttributesClassName = %v after the refusal, want %s", pv.Name, str(got), fast)
	}
	e.WaitEvent(t, "data", "VolumeModifyFailed", 30*time.Second)
	callsBefore := modifyCalls(t, e.Resizer)

	// Roll back: the PVC names the current class again; the modification is cancelled.
	setClass(t, e, "data", fast)
	pvc = e.WaitClaim(t, "data", modifyTimeout, modified(fast))
	noModifyConditions(t, pvc)
	if ev := e.WaitEvent(t, "data", "VolumeModifyCancelled", 30*time.Second); !strings.Contains(ev.Message, refused) {
		t.Errorf("VolumeModifyCancelled should name the cancelled class %s: %q", refused, ev.Message)
	}
	framework.Eventually(t, 10*time.Second, func() (bool, string) {
		body := scenario.Scrape(t, e.Resizer)
		ok := true
		var got []string
		for _, result := range []string{"success", "infeasible", "cancelled"} {
			n := scenario.MetricValue(body, "csi_resizer_volume_modifications_total", `result="`+result+`"`)
			got = append(got, fmt.Sprintf("%s=%v", result, n))
			ok = ok && n == 1
		}
		return ok, "csi_resizer_volume_modifications_total " + strings.Join(got, " ") + ", want 1 each"
	})
	if n := modifyCalls(t, e.Resizer) - callsBefore; n != 0 {
		t.Errorf("the rollback made %v ControllerModifyVolume calls, want 0 (the volume already has %s)", n, fast)
	}
}

// driverModifies reads the driver's controller MODIFY_VOLUME capability.
func driverModifies(t *testing.T, e *env) bool {
	t.Helper()
	conn, err := e.Driver.Dial()
	if err != nil {
		t.Fatalf("dial %s: %v", e.Driver.Endpoint, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(e.Ctx, 30*time.Second)
	defer cancel()
	resp, err := csi.NewControllerClient(conn).ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		t.Fatalf("ControllerGetCapabilities of %s: %v", e.Driver.Name, err)
	}
	for _, c := range resp.GetCapabilities() {
		if c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_MODIFY_VOLUME {
			return true
		}
	}
	return false
}

// createClass creates a VolumeAttributesClass of the driver under test.
func createClass(t *testing.T, e *env, name string, params map[string]string) string {
	t.Helper()
	vac := &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: name}, DriverName: e.Driver.Name, Parameters: params}
	if _, err := e.Client.StorageV1().VolumeAttributesClasses().Create(e.Ctx, vac, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create VolumeAttributesClass %s: %v", name, err)
	}
	return name
}

// setClass sets the PVC's spec.volumeAttributesClassName, as `kubectl patch` would.
func setClass(t *testing.T, e *env, name, class string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{"volumeAttributesClassName": class}})
	if _, err := e.Client.CoreV1().PersistentVolumeClaims(e.Namespace).Patch(e.Ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("set volumeAttributesClassName of PVC %s to %s: %v", name, class, err)
	}
}

// modified holds once the PVC's current class is class and no modification is under way.
func modified(class string) func(*v1.PersistentVolumeClaim) (bool, string) {
	return func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		cur := pvc.Status.CurrentVolumeAttributesClassName
		return cur != nil && *cur == class && pvc.Status.ModifyVolumeStatus == nil,
			fmt.Sprintf("want currentVolumeAttributesClassName %s and no modifyVolumeStatus; have %s", class, describeModify(pvc))
	}
}

// modifyStatus holds once the PVC's modifyVolumeStatus is {status, target}.
func modifyStatus(status v1.PersistentVolumeClaimModifyVolumeStatus, target string) func(*v1.PersistentVolumeClaim) (bool, string) {
	return func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		s := pvc.Status.ModifyVolumeStatus
		return s != nil && s.Status == status && s.TargetVolumeAttributesClassName == target,
			fmt.Sprintf("want modifyVolumeStatus %s to %s; have %s", status, target, describeModify(pvc))
	}
}

func noModifyConditions(t *testing.T, pvc *v1.PersistentVolumeClaim) {
	t.Helper()
	for _, ct := range []v1.PersistentVolumeClaimConditionType{v1.PersistentVolumeClaimVolumeModifyingVolume, v1.PersistentVolumeClaimVolumeModifyVolumeError} {
		if c := scenario.Condition(pvc, ct); c != nil {
			t.Errorf("condition %s left after the modification ended: %+v", ct, c)
		}
	}
}

func describeModify(pvc *v1.PersistentVolumeClaim) string {
	st := "none"
	if s := pvc.Status.ModifyVolumeStatus; s != nil {
		st = fmt.Sprintf("%s to %s", s.Status, s.TargetVolumeAttributesClassName)
	}
	var conds []string
	for _, c := range pvc.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s(%s: %s)", c.Type, c.Reason, c.Message))
	}
	return fmt.Sprintf("spec class %s, current %s, modifyVolumeStatus %s, conditions %v",
		str(pvc.Spec.VolumeAttributesClassName), str(pvc.Status.CurrentVolumeAttributesClassName), st, conds)
}

// modifyCalls is the resizer's own count of its ControllerModifyVolume calls.
func modifyCalls(t *testing.T, p *framework.Process) float64 {
	t.Helper()
	return scenario.MetricValue(scenario.Scrape(t, p), "csi_sidecar_operations_seconds_count", "ControllerModifyVolume")
}

func sameParameters(got, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// firstKey is the alphabetically first key of m.
func firstKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return ""
	}
	return keys[0]
}

func str(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return *s
}
