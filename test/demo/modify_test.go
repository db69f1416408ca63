//go:build integration

package demo

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// createClasses creates the demo's two VolumeAttributesClasses of the mock driver, as a
// cluster admin would.
func (d *demo) createClasses() {
	t, e := d.t, d.e
	classes := []struct {
		name   string
		params map[string]string
	}{
		{classFast, map[string]string{"iops": "3000", "throughput": "125"}},
		{classGold, map[string]string{refusedParam: "gold"}},
	}
	say("")
	say("Two VolumeAttributesClasses of the driver (cluster-scoped, created by an admin):")
	for _, c := range classes {
		vac := &storagev1.VolumeAttributesClass{ObjectMeta: metav1.ObjectMeta{Name: c.name}, DriverName: e.Driver.Name, Parameters: c.params}
		if _, err := e.Client.StorageV1().VolumeAttributesClasses().Create(e.Ctx, vac, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create VolumeAttributesClass %s: %v", c.name, err)
		}
		say("  %-6s parameters %v", c.name, c.params)
	}
}

// step4Modify: a VolumeAttributesClass the driver accepts.
func (d *demo) step4Modify() {
	d.header(4, "change the volume's VolumeAttributesClass: (none) -> "+classFast)
	d.setClass(classFast, classApplied(classFast))
	d.waitEvent("VolumeModifySuccessful")
	d.showClass()
	say("")
	say("csi-resizer recorded the target (modifyVolumeStatus InProgress, condition ModifyingVolume)")
	say("before calling ControllerModifyVolume with the class's parameters, then set the PV's")
	say("volumeAttributesClassName and the PVC's currentVolumeAttributesClassName, and cleared the rest.")
}

// step5RefusedClass: a class the driver refuses, then the roll back to the current class.
func (d *demo) step5RefusedClass() {
	d.header(5, "a class the driver refuses: "+classFast+" -> "+classGold+", then back to "+classFast)
	pvc := d.setClass(classGold, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		s := pvc.Status.ModifyVolumeStatus
		return s != nil && s.Status == v1.PersistentVolumeClaimModifyVolumeInfeasible, "want modifyVolumeStatus Infeasible"
	})
	d.waitEvent("VolumeModifyFailed")
	d.showClass()
	if c := scenario.Condition(pvc, v1.PersistentVolumeClaimVolumeModifyVolumeError); c == nil || c.Reason != "InvalidArgument" || !strings.Contains(c.Message, modifyMessage) {
		d.t.Errorf("ModifyVolumeError condition = %+v, want reason InvalidArgument with the driver's message %q", c, modifyMessage)
	}
	d.showInfeasibleClassGauge()
	say("")
	say("The driver said INVALID_ARGUMENT: this class cannot be applied. The PVC is Infeasible, the")
	say("volume keeps class %s (PV and currentVolumeAttributesClassName unchanged), and the call is", classFast)
	say("retried only every --retry-interval-max (5m). To get out of it, name another class, or roll")
	say("back to the class the volume has:")

	callsBefore := d.seenModifyCalls
	d.setClass(classFast, classApplied(classFast))
	if n := d.seenModifyCalls - callsBefore; n != 0 {
		d.t.Errorf("the roll back to %s made %d ControllerModifyVolume calls, want none (the volume has that class)", classFast, n)
	}
	d.waitEvent("VolumeModifyCancelled")
	d.showClass()
	say("")
	say("Rolled back without a call to the driver: the volume already has %s, so csi-resizer only", classFast)
	say("cleared modifyVolumeStatus and the conditions, and said so in a VolumeModifyCancelled event.")
}

// classApplied holds once class is the PVC's current class with no modification under way.
func classApplied(class string) func(*v1.PersistentVolumeClaim) (bool, string) {
	return func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		cur := pvc.Status.CurrentVolumeAttributesClassName
		return cur != nil && *cur == class && pvc.Status.ModifyVolumeStatus == nil,
			"want currentVolumeAttributesClassName " + class + " and no modifyVolumeStatus"
	}
}

// setClass changes the PVC's class with the harness's kubectl, prints what the resizer writes
// to the PVC and what the driver received, until done holds.
func (d *demo) setClass(class string, done func(*v1.PersistentVolumeClaim) (bool, string)) *v1.PersistentVolumeClaim {
	t, e := d.t, d.e
	patch := fmt.Sprintf(`{"spec":{"volumeAttributesClassName":"%s"}}`, class)
	say("")
	say("You:  kubectl patch pvc %s -n %s --type=merge -p '%s'", claim, e.Namespace, patch)
	began := time.Now()
	rv, err := e.Cluster.Kubectl(t, "patch", "pvc", claim, "-n", e.Namespace, "--type=merge", "-p", patch,
		"-o", "jsonpath={.metadata.resourceVersion}")
	if err != nil {
		t.Fatalf("%v", err)
	}
	say("")
	say("csi-resizer wrote the PVC's status (as a watch on the PVC saw it):")
	pvc := d.watchClaim(strings.TrimSpace(rv), classLine, done)
	took := time.Since(began).Round(time.Millisecond)
	say("")
	say("The CSI driver received:")
	calls := e.Driver.ModifyCalls(t, "")
	for _, c := range calls[d.seenModifyCalls:] {
		result := c.CodeName
		if c.CodeName != "OK" {
			result += ": " + c.Message
		}
		say("  ControllerModifyVolume  volume %s, mutable_parameters %v  ->  %s", c.VolumeID, c.MutableParameters, result)
	}
	if len(calls) == d.seenModifyCalls {
		say("  (nothing)")
	}
	d.seenModifyCalls = len(calls)
	say("")
	say("(done %s after you ran kubectl patch)", took)
	return pvc
}

// classLine is the one-line form of the modification part of the PVC's status.
func classLine(pvc *v1.PersistentVolumeClaim) string {
	st := "-"
	if s := pvc.Status.ModifyVolumeStatus; s != nil {
		st = fmt.Sprintf("%s(%s)", s.Status, s.TargetVolumeAttributesClassName)
	}
	var cs []string
	for _, c := range pvc.Status.Conditions {
		if c.Type == v1.PersistentVolumeClaimVolumeModifyingVolume || c.Type == v1.PersistentVolumeClaimVolumeModifyVolumeError {
			cs = append(cs, fmt.Sprintf("%s(%s)", c.Type, c.Reason))
		}
	}
	conds := "-"
	if len(cs) > 0 {
		conds = strings.Join(cs, ",")
	}
	return fmt.Sprintf("current=%s modifyVolumeStatus=%s conditions=%s", orDash(pvc.Status.CurrentVolumeAttributesClassName), st, conds)
}

// showClass prints the PVC's class fields, its PV's class and the PVC's new events.
func (d *demo) showClass() {
	t, e := d.t, d.e
	pvc := e.PVC(t, claim)
	pv := e.PV(t, d.pvName)
	st := "-"
	if s := pvc.Status.ModifyVolumeStatus; s != nil {
		st = fmt.Sprintf("%s, target %s", s.Status, s.TargetVolumeAttributesClassName)
	}
	say("")
	say("The PVC %s/%s now:", pvc.Namespace, pvc.Name)
	say("  %-14s %s", "class", padNote(orDash(pvc.Spec.VolumeAttributesClassName), "spec.volumeAttributesClassName: what you ask for"))
	say("  %-14s %s", "current", padNote(orDash(pvc.Status.CurrentVolumeAttributesClassName), "status.currentVolumeAttributesClassName: what the volume has"))
	say("  %-14s %s", "modify status", padNote(st, "status.modifyVolumeStatus"))
	for _, c := range pvc.Status.Conditions {
		if c.Type == v1.PersistentVolumeClaimVolumeModifyingVolume || c.Type == v1.PersistentVolumeClaimVolumeModifyVolumeError {
			say("  %-14s %s  reason=%s  message=%q", "condition", c.Type, c.Reason, c.Message)
		}
	}
	say("  %-14s %s", "PV class", padNote(orDash(pv.Spec.VolumeAttributesClassName), "the PersistentVolume's spec.volumeAttributesClassName"))
	d.printNewEvents(false)
}

// showInfeasibleClassGauge prints csi_resizer_volume_modify_infeasible for the claim, the
// series behind the CSIResizerModificationInfeasible alert.
func (d *demo) showInfeasibleClassGauge() {
	var line string
	d.poll("csi_resizer_volume_modify_infeasible for the PVC", 30*time.Second, func() (bool, string) {
		for _, l := range strings.Split(scenario.Scrape(d.t, d.e.Resizer), "\n") {
			if strings.HasPrefix(l, "csi_resizer_volume_modify_infeasible{") && strings.Contains(l, `persistentvolumeclaim="`+claim+`"`) && strings.HasSuffix(l, " 1") {
				line = l
				return true, ""
			}
		}
		return false, "no csi_resizer_volume_modify_infeasible sample of 1 for the PVC"
	})
	say("")
	say("csi-resizer's /metrics lists the PVC (alert CSIResizerModificationInfeasible fires on it after 15m):")
	say("  %s", line)
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}
