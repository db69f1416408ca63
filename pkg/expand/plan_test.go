package expand

import (
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/csi-resizer/csi-resizer/pkg/internal/conditions"
)

// The KEP-1790 user stories (kep-1790-recover-from-volume-expansion-failure.txt, "User flow
// stories"), one subtest per story. Every step observes the PVC the previous steps wrote.
func TestKEPUserStories(t *testing.T) {
	t.Run("Case 0 default PVC creation: nothing to do", func(t *testing.T) {
		c := newCluster(t, "10Gi", false)
		wantPlan(t, "created 10Gi", c.plan(), Nothing, "", false, false)
		// The same with allocatedResources already recorded at creation.
		c.pvc.Status.AllocatedResources = v1.ResourceList{v1.ResourceStorage: q("10Gi")}
		wantPlan(t, "created 10Gi with alloc", c.plan(), Nothing, "", false, false)
		c.wantRequests("end")
	})

	t.Run("Case 1 controller+node expandable: infeasible 100Gi, user lowers to 20Gi, recovers", func(t *testing.T) {
		c := newCluster(t, "10Gi", false)
		c.userRequests("100Gi")
		c.wantQuantity("user asks 100Gi", "quota", c.quota(), "100Gi")

		p := c.plan()
		wantPlan(t, "expand to 100Gi", p, ExpandController, "100Gi", false, false)
		c.start(p)
		c.wantAlloc("started", "100Gi")
		c.wantState("started", v1.PersistentVolumeClaimControllerResizeInProgress)
		c.wantQuantity("started", "quota", c.quota(), "100Gi")

		c.driverFails(status.Error(codes.OutOfRange, "pool has 50Gi free"))
		c.wantState("failed", v1.PersistentVolumeClaimControllerResizeInfeasible)
		c.wantCapacities("failed", "10Gi", "10Gi")

		// The slow retry while spec is unchanged asks for spec again: not a recovery.
		wantPlan(t, "retry at 100Gi", c.plan(), ExpandController, "100Gi", false, false)

		c.userRequests("20Gi")
		p = c.plan()
		wantPlan(t, "user lowers to 20Gi", p, ExpandController, "20Gi", true, false)
		c.start(p)
		c.wantAlloc("recovery started", "20Gi")
		c.driverSucceeds(p, "20Gi", false)
		c.wantCapacities("recovered", "20Gi", "20Gi")
		c.wantState("recovered", "")
		wantPlan(t, "done", c.plan(), Nothing, "", false, false)
		c.wantQuantity("done", "quota", c.quota(), "20Gi")
		c.wantRequests("end", "100Gi", "20Gi")
		if c.pvLowerings != 0 {
			t.Errorf("PV capacity lowered %d times on a controller driver", c.pvLowerings)
		}
	})

	t.Run("Case 2 node only expandable: node fails 100Gi, user lowers to 20Gi, PV lowered", func(t *testing.T) {
		c := newCluster(t, "10Gi", true)
		c.userRequests("100Gi")
		p := c.plan()
		wantPlan(t, "expand to 100Gi", p, ExpandNodeOnly, "100Gi", false, false)
		c.start(p)
		c.wantAlloc("started", "100Gi")
		c.wantState("started", v1.PersistentVolumeClaimControllerResizeInProgress)
		c.nodeOnlyExpanded(p)
		c.wantState("control plane done", v1.PersistentVolumeClaimNodeResizePending)
		c.wantCapacities("control plane done", "10Gi", "100Gi")
		wantPlan(t, "node pending", c.plan(), Nothing, "", false, false)

		c.kubelet(v1.PersistentVolumeClaimNodeResizeInProgress)
		wantPlan(t, "node in progress", c.plan(), Nothing, "", false, false)
		c.kubelet(v1.PersistentVolumeClaimNodeResizeInfeasible)
		// Spec unchanged: following spec is 100Gi again, the PV stays.
		wantPlan(t, "node failed, spec unchanged", c.plan(), ExpandNodeOnly, "100Gi", false, false)

		c.userRequests("20Gi")
		p = c.plan()
		wantPlan(t, "user lowers to 20Gi", p, ExpandNodeOnly, "20Gi", true, true)
		c.start(p)
		c.wantAlloc("recovery started", "20Gi")
		c.wantState("recovery started", v1.PersistentVolumeClaimControllerResizeInProgress)
		c.nodeOnlyExpanded(p)
		c.wantCapacities("PV lowered", "10Gi", "20Gi")
		c.wantState("PV lowered", v1.PersistentVolumeClaimNodeResizePending)
		c.wantAlloc("PV lowered", "20Gi")
		wantPlan(t, "node pending again", c.plan(), Nothing, "", false, false)

		c.kubelet(v1.PersistentVolumeClaimNodeResizeInProgress)
		c.kubeletFinishes()
		c.wantCapacities("node done", "20Gi", "20Gi")
		wantPlan(t, "done", c.plan(), Nothing, "", false, false)
		c.wantQuantity("done", "quota", c.quota(), "20Gi")
		c.wantRequests("end") // a node-only driver is never called
		if c.pvLowerings != 1 {
			t.Errorf("PV capacity lowered %d times, want once (the Case 2 recovery)", c.pvLowerings)
		}
	})

	t.Run("Case 3 malicious user lowers while in progress: 100Gi kept", func(t *testing.T) {
		c := newCluster(t, "10Gi", false)
		c.userRequests("100Gi")
		p := c.plan()
		wantPlan(t, "expand to 100Gi", p, ExpandController, "100Gi", false, false)
		c.start(p)
		c.wantCapacities("in progress", "10Gi", "10Gi")

		c.userRequests("20Gi")
		p2 := c.plan()
		wantPlan(t, "user lowers to 20Gi while in progress", p2, ExpandController, "100Gi", false, false)
		c.wantQuantity("user lowers", "quota", c.quota(), "100Gi")

		c.driverSucceeds(p, "100Gi", false)
		c.wantCapacities("done", "100Gi", "100Gi")
		c.wantState("done", "")
		wantPlan(t, "done", c.plan(), Nothing, "", false, false)
		c.wantQuantity("done", "quota", c.quota(), "100Gi")
		c.wantRequests("end", "100Gi")
	})

	t.Run("Case 4 rounding and a resizer crash: restarted resizer keeps 100G", func(t *testing.T) {
		// 10.1G requested, the backend made 11G, the API records 10.1G.
		c := newCluster(t, "10.1G", false)
		c.userRequests("100G")
		c.wantQuantity("user asks 100G", "quota", c.quota(), "100G")
		p := c.plan()
		wantPlan(t, "expand to 100G", p, ExpandController, "100G", false, false)
		c.start(p)
		c.wantCapacities("in progress", "10.1G", "10.1G")

		// Crash while the call is in flight; the new process sees only the API objects.
		c = c.restart()
		c.userRequests("10.5G")
		p2 := c.plan()
		wantPlan(t, "after restart, user lowers to 10.5G", p2, ExpandController, "100G", false, false)
		if d := samePlan(p, p2); d != "" {
			t.Errorf("restarted resizer decided differently: %s", d)
		}
		c.start(p2)
		c.driverSucceeds(p2, "100G", false)
		c.wantCapacities("done", "100G", "100G")
		wantPlan(t, "done", c.plan(), Nothing, "", false, false)
		c.wantQuantity("done", "quota", c.quota(), "100G")
		c.wantRequests("end", "100G", "100G") // 10.5G never attempted
	})

	t.Run("a resizer killed between the PV write and the PVC's: the next records the answer without calling again", func(t *testing.T) {
		for _, node := range []bool{true, false} {
			c := newCluster(t, "1Gi", false)
			c.userRequests("2Gi")
			p := c.plan()
			c.start(p)
			c.pvWritten("2Gi", node) // the driver answered, the PV holds it; then SIGKILL
			c = c.restart()
			p2 := c.plan()
			if p2.Action != RecordExpanded || p2.Target.Cmp(q("2Gi")) != 0 || p2.NodeRequired != node {
				t.Fatalf("node step %v: after the restart %s %s nodeRequired=%v (%s), want RecordExpanded 2Gi", node, p2.Action, p2.Target.String(), p2.NodeRequired, p2.Why)
			}
			c.recordExpanded(p2)
			if node {
				c.wantState("recorded", v1.PersistentVolumeClaimNodeResizePending)
				c.wantCapacities("recorded", "1Gi", "2Gi")
			} else {
				c.wantState("recorded", "")
				c.wantCapacities("recorded", "2Gi", "2Gi")
			}
			wantPlan(t, "recorded", c.plan(), Nothing, "", false, false)
			c.wantRequests("end", "2Gi") // one call
		}
	})

	t.Run("a PV record of another size is not trusted: the call is made", func(t *testing.T) {
		c := newCluster(t, "1Gi", false)
		c.pvWritten("1Gi", true) // an earlier expansion's record
		c.userRequests("2Gi")
		p := c.plan()
		c.start(p)
		c = c.restart()
		wantPlan(t, "restarted before the call returned", c.plan(), ExpandController, "2Gi", false, false)
		c.pv.Annotations[AnnControllerExpanded] = `{"capacity":"2Gi","nodeExpansionRequired":true}` // by hand, PV still 1Gi
		wantPlan(t, "a record above the PV capacity", c.plan(), ExpandController, "2Gi", false, false)
	})

	t.Run("Case 5 rapid expand to 200Gi and shrink to 20Gi while in progress: 100Gi kept", func(t *testing.T) {
		c := newCluster(t, "10Gi", false)
		c.userRequests("100Gi")
		p := c.plan()
		wantPlan(t, "expand to 100Gi", p, ExpandController, "100Gi", false, false)
		c.start(p)

		c.userRequests("200Gi")
		c.wantQuantity("user asks 200Gi", "quota", c.quota(), "200Gi")
		wantPlan(t, "200Gi while 100Gi in progress", c.plan(), ExpandController, "100Gi", false, false)

		c.userRequests("20Gi")
		c.wantQuantity("user lowers to 20Gi", "quota", c.quota(), "100Gi")
		wantPlan(t, "20Gi while 100Gi in progress", c.plan(), ExpandController, "100Gi", false, false)

		c.driverSucceeds(p, "100Gi", false)
		c.wantCapacities("done", "100Gi", "100Gi")
		wantPlan(t, "done", c.plan(), Nothing, "", false, false)
		c.wantQuantity("done", "quota", c.quota(), "100Gi")
		c.wantRequests("end", "100Gi")
	})
}

func TestNodeOnlyDriverNeverCallsTheDriver(t *testing.T) {
	c := newCluster(t, "1Gi", true)
	c.userRequests("5Gi")
	p := c.plan()
	wantPlan(t, "expand", p, ExpandNodeOnly, "5Gi", false, false)
	c.start(p)
	c.nodeOnlyExpanded(p)
	c.wantState("control plane done", v1.PersistentVolumeClaimNodeResizePending)
	if cond := conditions.Find(c.pvc.Status.Conditions, v1.PersistentVolumeClaimFileSystemResizePending); cond == nil {
		t.Error("no FileSystemResizePending condition for the node")
	}
	c.kubeletFinishes()
	c.wantCapacities("done", "5Gi", "5Gi")
	wantPlan(t, "done", c.plan(), Nothing, "", false, false)
	c.wantRequests("end")
}

func TestNodeResizeInfeasible(t *testing.T) {
	t.Run("node-only driver follows spec and lowers the PV below its capacity", func(t *testing.T) {
		o := Observed{Spec: q("20Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimNodeResizeInfeasible,
			PVCap: q("100Gi"), PVCCap: q("10Gi"), NodeOnly: true}
		wantPlan(t, "lower", PlanExpansion(o), ExpandNodeOnly, "20Gi", true, true)
	})
	t.Run("node-only driver with spec raised above the PV", func(t *testing.T) {
		o := Observed{Spec: q("200Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimNodeResizeInfeasible,
			PVCap: q("100Gi"), PVCCap: q("10Gi"), NodeOnly: true}
		wantPlan(t, "raise", PlanExpansion(o), ExpandNodeOnly, "200Gi", false, false)
	})
	t.Run("node-only driver with spec back at capacity cancels to capacity", func(t *testing.T) {
		o := Observed{Spec: q("10Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimNodeResizeInfeasible,
			PVCap: q("100Gi"), PVCCap: q("10Gi"), NodeOnly: true}
		wantPlan(t, "cancel", PlanExpansion(o), ExpandNodeOnly, "10Gi", true, true)
	})

	t.Run("controller driver re-drives the node at alloc whatever spec says", func(t *testing.T) {
		c := newCluster(t, "10Gi", false)
		c.userRequests("100Gi")
		p := c.plan()
		c.start(p)
		c.driverSucceeds(p, "100Gi", true)
		c.wantState("controller done", v1.PersistentVolumeClaimNodeResizePending)
		c.wantCapacities("controller done", "10Gi", "100Gi")
		c.kubelet(v1.PersistentVolumeClaimNodeResizeInProgress)
		c.kubelet(v1.PersistentVolumeClaimNodeResizeInfeasible)

		for _, spec := range []string{"20Gi", "10Gi", "100Gi", "300Gi"} {
			c.userRequests(spec)
			wantPlan(t, "node failed, spec "+spec, c.plan(), RedriveNode, "100Gi", false, false)
		}
		p = c.plan()
		c.redrive(p)
		c.wantState("re-driven", v1.PersistentVolumeClaimNodeResizePending)
		c.wantAlloc("re-driven", "100Gi")
		if cond := conditions.Find(c.pvc.Status.Conditions, v1.PersistentVolumeClaimNodeResizeError); cond != nil {
			t.Errorf("NodeResizeError kept after re-drive: %+v", cond)
		}
		if cond := conditions.Find(c.pvc.Status.Conditions, v1.PersistentVolumeClaimFileSystemResizePending); cond == nil || cond.Status != v1.ConditionTrue {
			t.Errorf("no FileSystemResizePending after re-drive: %+v", c.pvc.Status.Conditions)
		}
		wantPlan(t, "re-driven", c.plan(), Nothing, "", false, false)
		c.kubeletFinishes()
		c.wantCapacities("node done", "100Gi", "100Gi")
		c.wantRequests("end", "100Gi") // the re-drive calls no driver
	})
	t.Run("controller driver without alloc re-drives at the PV capacity", func(t *testing.T) {
		o := Observed{Spec: q("20Gi"), State: v1.PersistentVolumeClaimNodeResizeInfeasible, PVCap: q("100Gi"), PVCCap: q("10Gi")}
		wantPlan(t, "no alloc", PlanExpansion(o), RedriveNode, "100Gi", false, false)
	})
}

// errorThenLowerSpec expands 10Gi → 100Gi, lets the driver fail with err, then lowers spec to
// 20Gi and returns the cluster and the plan for it.
func errorThenLowerSpec(t *testing.T, err error) (*cluster, Plan) {
	t.Helper()
	c := newCluster(t, "10Gi", false)
	c.userRequests("100Gi")
	p := c.plan()
	c.start(p)
	c.driverFails(err)
	c.userRequests("20Gi")
	return c, c.plan()
}

func TestErrorThenLowerSpec(t *testing.T) {
	nonFinal := []error{
		status.Error(codes.DeadlineExceeded, "context deadline exceeded"),
		status.Error(codes.Unavailable, "connection refused"),
		status.Error(codes.Canceled, "canceled"),
		status.Error(codes.ResourceExhausted, "too many requests"),
		status.Error(codes.Aborted, "operation pending for volume"),
		errors.New("transport is closing"), // no gRPC status: reason Uncertain
	}
	for _, err := range nonFinal {
		t.Run("uncertain "+ClassifyError(err).Reason+" keeps alloc", func(t *testing.T) {
			c, p := errorThenLowerSpec(t, err)
			c.wantState("after error", v1.PersistentVolumeClaimControllerResizeInProgress)
			wantPlan(t, "lowered to 20Gi", p, ExpandController, "100Gi", false, false)
			// Again after a restart: the class comes back from the condition reason.
			wantPlan(t, "lowered to 20Gi, after restart", c.restart().plan(), ExpandController, "100Gi", false, false)
			// A retry that succeeds finishes at 100Gi.
			c.start(p)
			c.driverSucceeds(p, "100Gi", false)
			c.wantCapacities("done", "100Gi", "100Gi")
			c.wantRequests("end", "100Gi", "100Gi")
		})
	}

	for _, code := range []codes.Code{codes.InvalidArgument, codes.OutOfRange, codes.NotFound} {
		t.Run("infeasible "+code.String()+" recovers to the lower size", func(t *testing.T) {
			c, p := errorThenLowerSpec(t, status.Error(code, "no"))
			c.wantState("after error", v1.PersistentVolumeClaimControllerResizeInfeasible)
			wantPlan(t, "lowered to 20Gi", p, ExpandController, "20Gi", true, false)
			c.start(p)
			c.driverSucceeds(p, "20Gi", false)
			c.wantCapacities("done", "20Gi", "20Gi")
			c.wantAlloc("done", "20Gi")
			c.wantRequests("end", "100Gi", "20Gi")
		})
	}

	for _, code := range []codes.Code{codes.Internal, codes.FailedPrecondition, codes.Unimplemented, codes.Unknown, codes.PermissionDenied, codes.AlreadyExists, codes.DataLoss, codes.Unauthenticated} {
		t.Run("final "+code.String()+" recovers to the lower size", func(t *testing.T) {
			c, p := errorThenLowerSpec(t, status.Error(code, "backend said no"))
			c.wantState("after error", v1.PersistentVolumeClaimControllerResizeInProgress)
			wantPlan(t, "lowered to 20Gi", p, ExpandController, "20Gi", true, false)
			wantPlan(t, "lowered to 20Gi, after restart", c.restart().plan(), ExpandController, "20Gi", true, false)
			c.start(p)
			c.driverSucceeds(p, "20Gi", false)
			c.wantCapacities("done", "20Gi", "20Gi")
			c.wantRequests("end", "100Gi", "20Gi")
		})
	}

	t.Run("uncertain after a final error: the last error decides", func(t *testing.T) {
		c, _ := errorThenLowerSpec(t, status.Error(codes.Internal, "boom"))
		c.userRequests("100Gi")
		p := c.plan()
		c.start(p)
		c.driverFails(status.Error(codes.DeadlineExceeded, "timeout"))
		c.userRequests("20Gi")
		wantPlan(t, "lowered after the timeout", c.plan(), ExpandController, "100Gi", false, false)
	})

	t.Run("recovery interrupted by a timeout keeps the recovery target", func(t *testing.T) {
		c, p := errorThenLowerSpec(t, status.Error(codes.OutOfRange, "no"))
		c.start(p) // alloc 20Gi
		c.driverFails(status.Error(codes.DeadlineExceeded, "timeout"))
		c.userRequests("15Gi")
		wantPlan(t, "after the timeout", c.plan(), ExpandController, "20Gi", false, false)
	})

	t.Run("infeasible, spec back to capacity: cancel at capacity", func(t *testing.T) {
		c, _ := errorThenLowerSpec(t, status.Error(codes.OutOfRange, "no"))
		c.userRequests("10Gi")
		p := c.plan()
		wantPlan(t, "cancel", p, ExpandController, "10Gi", true, false)
		c.start(p)
		c.driverSucceeds(p, "10Gi", false)
		c.wantState("cancelled", "")
		wantPlan(t, "cancelled", c.plan(), Nothing, "", false, false)
	})
}

// TestRestartDecidesTheSame is rule 7 and Case 4: the decision of a restarted resizer, which
// knows only what the API server returns, is the decision the crashed one was about to make
// from what it remembered (the class of the error the driver returned, the state it wrote).
func TestRestartDecidesTheSame(t *testing.T) {
	type memory struct {
		state     v1.ClaimResourceStatus
		alloc     string
		lastError ErrorClass
	}
	cases := []struct {
		name     string
		nodeOnly bool
		run      func(c *cluster) memory
	}{
		{"crash during the first call", false, func(c *cluster) memory {
			c.userRequests("100Gi")
			c.start(c.plan())
			c.userRequests("20Gi")
			return memory{v1.PersistentVolumeClaimControllerResizeInProgress, "100Gi", ClassNone}
		}},
		{"crash after a timeout, spec lowered", false, func(c *cluster) memory {
			c.userRequests("100Gi")
			c.start(c.plan())
			ce := c.driverFails(status.Error(codes.DeadlineExceeded, "timeout"))
			c.userRequests("20Gi")
			return memory{v1.PersistentVolumeClaimControllerResizeInProgress, "100Gi", ce.Class}
		}},
		{"crash after a non-gRPC error, spec lowered", false, func(c *cluster) memory {
			c.userRequests("100Gi")
			c.start(c.plan())
			ce := c.driverFails(fmt.Errorf("dial unix /run/csi/socket: %w", errors.New("connection refused")))
			c.userRequests("20Gi")
			return memory{v1.PersistentVolumeClaimControllerResizeInProgress, "100Gi", ce.Class}
		}},
		{"crash after a final error, spec lowered", false, func(c *cluster) memory {
			c.userRequests("100Gi")
			c.start(c.plan())
			ce := c.driverFails(fmt.Errorf("expand vol-1: %w", status.Error(codes.Internal, "backend crashed")))
			c.userRequests("20Gi")
			return memory{v1.PersistentVolumeClaimControllerResizeInProgress, "100Gi", ce.Class}
		}},
		{"crash after an infeasible error, spec lowered", false, func(c *cluster) memory {
			c.userRequests("100Gi")
			c.start(c.plan())
			ce := c.driverFails(status.Error(codes.OutOfRange, "too big"))
			c.userRequests("20Gi")
			return memory{v1.PersistentVolumeClaimControllerResizeInfeasible, "100Gi", ce.Class}
		}},
		{"crash during a recovery call after a final error", false, func(c *cluster) memory {
			c.userRequests("100Gi")
			c.start(c.plan())
			c.driverFails(status.Error(codes.Internal, "backend crashed"))
			c.userRequests("20Gi")
			c.start(c.plan())
			c.userRequests("30Gi")
			// The call to 20Gi is in flight: its outcome is unknown, 20Gi must be kept.
			return memory{v1.PersistentVolumeClaimControllerResizeInProgress, "20Gi", ClassNone}
		}},
		{"crash with the node expansion pending", false, func(c *cluster) memory {
			c.userRequests("100Gi")
			p := c.plan()
			c.start(p)
			c.driverSucceeds(p, "100Gi", true)
			c.userRequests("20Gi")
			return memory{v1.PersistentVolumeClaimNodeResizePending, "100Gi", ClassNone}
		}},
		{"node-only crash during the Case 2 recovery, before the PV was lowered", true, func(c *cluster) memory {
			c.userRequests("100Gi")
			p := c.plan()
			c.start(p)
			c.nodeOnlyExpanded(p)
			c.kubelet(v1.PersistentVolumeClaimNodeResizeInfeasible)
			c.userRequests("20Gi")
			c.start(c.plan())
			return memory{v1.PersistentVolumeClaimControllerResizeInProgress, "20Gi", ClassNone}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, "10Gi", tc.nodeOnly)
			m := tc.run(c)
			remembered := Observed{
				Spec:      c.pvc.Spec.Resources.Requests[v1.ResourceStorage],
				Alloc:     qp(m.alloc),
				State:     m.state,
				PVCap:     c.pv.Spec.Capacity[v1.ResourceStorage],
				PVCCap:    c.pvc.Status.Capacity[v1.ResourceStorage],
				LastError: m.lastError,
				NodeOnly:  tc.nodeOnly,
			}
			before := PlanExpansion(remembered)

			r := c.restart()
			o := r.observe()
			if o.State != m.state || o.LastError.IsFinal() != m.lastError.IsFinal() || o.Alloc == nil || o.Alloc.Cmp(q(m.alloc)) != 0 {
				t.Errorf("observed after restart: state=%q lastError=%q alloc=%v; remembered state=%q lastError=%q alloc=%s",
					o.State, o.LastError, quantityPtr(o.Alloc), m.state, m.lastError, m.alloc)
			}
			after := r.plan()
			if d := samePlan(before, after); d != "" {
				t.Errorf("decision before the crash vs after the restart: %s", d)
			}
		})
	}
}

// TestPlanRules covers single decisions of docs/design.md §2.3 that the stories do not reach.
func TestPlanRules(t *testing.T) {
	ip := v1.PersistentVolumeClaimControllerResizeInProgress
	cases := []struct {
		name     string
		o        Observed
		action   Action
		target   string
		recovery bool
		lowerPV  bool
	}{
		{"no state, spec above capacity: follow spec", Observed{Spec: q("20Gi"), PVCap: q("10Gi"), PVCCap: q("10Gi")},
			ExpandController, "20Gi", false, false},
		{"no state, spec equal to capacity: nothing", Observed{Spec: q("10Gi"), Alloc: qp("10Gi"), PVCap: q("10Gi"), PVCCap: q("10Gi")},
			Nothing, "", false, false},
		{"no state, spec below capacity (driver rounded up): nothing", Observed{Spec: q("10Gi"), PVCap: q("12Gi"), PVCCap: q("12Gi")},
			Nothing, "", false, false},
		{"no state, rounded-up PV: never ask below the PV capacity", Observed{Spec: q("11Gi"), PVCap: q("12Gi"), PVCCap: q("10Gi")},
			ExpandController, "12Gi", false, false},
		{"no state, node-only: follow spec, no driver call", Observed{Spec: q("20Gi"), PVCap: q("10Gi"), PVCCap: q("10Gi"), NodeOnly: true},
			ExpandNodeOnly, "20Gi", false, false},
		{"in progress without error, alloc absent: follow spec", Observed{Spec: q("20Gi"), State: ip, PVCap: q("10Gi"), PVCCap: q("10Gi")},
			ExpandController, "20Gi", false, false},
		{"in progress without error, spec raised: keep alloc", Observed{Spec: q("500Gi"), Alloc: qp("100Gi"), State: ip, PVCap: q("10Gi"), PVCCap: q("10Gi")},
			ExpandController, "100Gi", false, false},
		{"in progress after a final error, spec raised: follow spec", Observed{Spec: q("500Gi"), Alloc: qp("100Gi"), State: ip, PVCap: q("10Gi"), PVCCap: q("10Gi"), LastError: ClassFinal},
			ExpandController, "500Gi", false, false},
		{"in progress after an infeasible error: follow spec", Observed{Spec: q("20Gi"), Alloc: qp("100Gi"), State: ip, PVCap: q("10Gi"), PVCCap: q("10Gi"), LastError: ClassInfeasible},
			ExpandController, "20Gi", true, false},
		{"infeasible, recovery never below the PV capacity", Observed{Spec: q("20Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimControllerResizeInfeasible, PVCap: q("50Gi"), PVCCap: q("10Gi")},
			ExpandController, "50Gi", true, false},
		{"final error, recovery never below status.capacity", Observed{Spec: q("5Gi"), Alloc: qp("100Gi"), State: ip, PVCap: q("10Gi"), PVCCap: q("10Gi"), LastError: ClassFinal},
			ExpandController, "10Gi", true, false},
		{"node-only crash before the PV was lowered: keep alloc, lower the PV", Observed{Spec: q("30Gi"), Alloc: qp("20Gi"), State: ip, PVCap: q("100Gi"), PVCCap: q("10Gi"), NodeOnly: true},
			ExpandNodeOnly, "20Gi", false, true},
		{"node pending, spec lowered: nothing", Observed{Spec: q("20Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimNodeResizePending, PVCap: q("100Gi"), PVCCap: q("10Gi")},
			Nothing, "", false, false},
		{"node in progress, spec raised: nothing", Observed{Spec: q("200Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimNodeResizeInProgress, PVCap: q("100Gi"), PVCCap: q("10Gi"), NodeOnly: true},
			Nothing, "", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanExpansion(tc.o)
			checkPlanInvariants(t, tc.o, p)
			wantPlan(t, tc.name, p, tc.action, tc.target, tc.recovery, tc.lowerPV)
		})
	}
}

// TestNodeOnlyLowersPVOnlyInCase2Recovery is rule 4 for node-only drivers: the PV capacity is
// what the kubelet expands the file system to, so it may go down only in a KEP-1790 Case 2
// recovery, when the node is known not to be acting on it: the node failed for good
// (NodeResizeInfeasible, Design Details item 2), or the resizer already recorded an allocation
// below the PV for such a recovery and crashed before lowering the PV. Everywhere else a
// node-only target never goes below the PV capacity, like a controller driver's.
func TestNodeOnlyLowersPVOnlyInCase2Recovery(t *testing.T) {
	ip := v1.PersistentVolumeClaimControllerResizeInProgress
	cases := []struct {
		name     string
		o        Observed
		target   string
		recovery bool
		lowerPV  bool
	}{
		// An older/upstream resizer raised the PV to 12Gi and left FileSystemResizePending without
		// allocatedResourceStatuses: the node may be expanding to 12Gi right now.
		{"no state, PV raised above spec by another resizer: keep the PV",
			Observed{Spec: q("11Gi"), PVCap: q("12Gi"), PVCCap: q("10Gi"), NodeOnly: true}, "12Gi", false, false},
		{"no state with alloc at the PV, spec lowered: keep the PV",
			Observed{Spec: q("11Gi"), Alloc: qp("12Gi"), PVCap: q("12Gi"), PVCCap: q("10Gi"), NodeOnly: true}, "12Gi", false, false},
		// Crash between the PV write and the NodeResizePending write: the control-plane part
		// succeeded, so no Design Details item allows a lower allocation, whatever error the
		// condition still records.
		{"in progress after a final error, alloc at the PV: keep the PV",
			Observed{Spec: q("20Gi"), Alloc: qp("100Gi"), State: ip, PVCap: q("100Gi"), PVCCap: q("10Gi"), LastError: ClassFinal, NodeOnly: true}, "100Gi", false, false},
		{"controller infeasible state, alloc at the PV: keep the PV",
			Observed{Spec: q("20Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimControllerResizeInfeasible, PVCap: q("100Gi"), PVCCap: q("10Gi"), NodeOnly: true}, "100Gi", false, false},
		// NodeResizeInfeasible with nothing recorded about what the node failed on is not
		// written by any component; without a recorded allocation it is not provably Case 2.
		{"node infeasible without alloc: re-drive at the PV capacity",
			Observed{Spec: q("20Gi"), State: v1.PersistentVolumeClaimNodeResizeInfeasible, PVCap: q("100Gi"), PVCCap: q("10Gi"), NodeOnly: true}, "100Gi", false, false},
		// The genuine Case 2 recoveries still lower the PV.
		{"Case 2: node infeasible, spec lowered: lower the PV",
			Observed{Spec: q("20Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimNodeResizeInfeasible, PVCap: q("100Gi"), PVCCap: q("10Gi"), NodeOnly: true}, "20Gi", true, true},
		{"Case 2 crash before the PV was lowered, after a final error: lower the PV",
			Observed{Spec: q("15Gi"), Alloc: qp("20Gi"), State: ip, PVCap: q("100Gi"), PVCCap: q("10Gi"), LastError: ClassFinal, NodeOnly: true}, "15Gi", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := PlanExpansion(tc.o)
			checkPlanInvariants(t, tc.o, p)
			wantPlan(t, tc.name, p, ExpandNodeOnly, tc.target, tc.recovery, tc.lowerPV)
		})
	}
}

// TestNodeOnlyAfterLegacyResizerKeepsPV is the story behind the rule above: an older resizer
// (no allocated*) raised the PV of a node-only volume and handed over to the node; the user then
// lowers the request a little, and this resizer takes over. It must not pull the PV from under
// the node expansion.
func TestNodeOnlyAfterLegacyResizerKeepsPV(t *testing.T) {
	c := newCluster(t, "10Gi", true)
	c.legacy = true
	c.userRequests("12Gi")
	p := c.plan()
	c.start(p)
	c.nodeOnlyExpanded(p)
	c.wantCapacities("older resizer done", "10Gi", "12Gi")
	c.wantState("older resizer done", "")

	c.legacy = false
	c.userRequests("11Gi")
	p = c.plan()
	wantPlan(t, "spec lowered below the PV", p, ExpandNodeOnly, "12Gi", false, false)
	c.start(p)
	c.nodeOnlyExpanded(p)
	c.wantState("handed to the node", v1.PersistentVolumeClaimNodeResizePending)
	c.kubeletFinishes()
	c.wantCapacities("node done", "12Gi", "12Gi")
	wantPlan(t, "done", c.plan(), Nothing, "", false, false)
	if c.pvLowerings != 0 {
		t.Errorf("PV capacity lowered %d times outside a Case 2 recovery", c.pvLowerings)
	}
}

// An allocatedResourceStatuses value this resizer does not know (written by a newer kubelet or
// controller) is neither "no state" nor "known to have failed". KEP-1790 Design Details: the
// resizer follows spec "only when previous operation has finished (i.e.
// pvc.Status.AllocatedResourceStatus[storage] is nil) or when previous operation has failed
// with a terminal error"; docs/design.md §2.3 rule 2 says the same (the target follows spec
// only when there is no state or the previous attempt is known to have stopped). So an unknown
// state must never lower the target below alloc.
func TestUnknownStateNeverLowersBelowAlloc(t *testing.T) {
	for _, nodeOnly := range []bool{false, true} {
		// Controller driver: a failed controller expansion left the PV at 10Gi. Node-only: the PV
		// already says 100Gi, and a node may be acting on it.
		pvCap := "10Gi"
		if nodeOnly {
			pvCap = "100Gi"
		}
		o := Observed{Spec: q("20Gi"), Alloc: qp("100Gi"), State: "NodeResizeSomethingNew",
			PVCap: q(pvCap), PVCCap: q("10Gi"), NodeOnly: nodeOnly}
		p := PlanExpansion(o)
		if p.Action != Nothing && p.Target.Cmp(*o.Alloc) < 0 {
			t.Errorf("nodeOnly=%v: unknown state %q: %s to %s (recovery=%v lowerPV=%v), below alloc %s: %s",
				nodeOnly, o.State, p.Action, p.Target.String(), p.Recovery, p.LowerPV, o.Alloc.String(), p.Why)
		}
	}
	// An unknown state with spec above alloc is not held back below spec by this rule either.
	o := Observed{Spec: q("200Gi"), Alloc: qp("100Gi"), State: "SomethingNew", PVCap: q("10Gi"), PVCCap: q("10Gi")}
	checkPlanInvariants(t, o, PlanExpansion(o))
}

func TestLegacy(t *testing.T) {
	t.Run("controller driver: expands to spec, never touches allocated*", func(t *testing.T) {
		c := newCluster(t, "10Gi", false)
		c.legacy = true
		c.userRequests("100Gi")
		p := c.plan()
		wantPlan(t, "expand", p, ExpandController, "100Gi", false, false)
		c.start(p)
		c.driverFails(status.Error(codes.OutOfRange, "too big"))
		if c.pvc.Status.AllocatedResources != nil || c.pvc.Status.AllocatedResourceStatuses != nil {
			t.Errorf("legacy wrote allocated*: %v %v", c.pvc.Status.AllocatedResources, c.pvc.Status.AllocatedResourceStatuses)
		}
		if cond := conditions.Find(c.pvc.Status.Conditions, v1.PersistentVolumeClaimControllerResizeError); cond == nil || cond.Reason != "OutOfRange" {
			t.Errorf("legacy error condition = %+v", cond)
		}
		c.userRequests("20Gi")
		p = c.plan()
		wantPlan(t, "lowered", p, ExpandController, "20Gi", false, false)
		c.start(p)
		c.driverSucceeds(p, "20Gi", true)
		if cond := conditions.Find(c.pvc.Status.Conditions, v1.PersistentVolumeClaimFileSystemResizePending); cond == nil {
			t.Error("legacy: no FileSystemResizePending for the node")
		}
		// The PV has spec: the controller part is done and only the kubelet has work left.
		wantPlan(t, "node pending", c.plan(), Nothing, "", false, false)
		c.kubeletFinishes()
		c.wantCapacities("done", "20Gi", "20Gi")
		if c.pvc.Status.AllocatedResources != nil || c.pvc.Status.AllocatedResourceStatuses != nil {
			t.Errorf("legacy wrote allocated*: %v %v", c.pvc.Status.AllocatedResources, c.pvc.Status.AllocatedResourceStatuses)
		}
		wantPlan(t, "done", c.plan(), Nothing, "", false, false)
		c.wantRequests("end", "100Gi", "20Gi")
	})

	t.Run("ignores allocated* left by a KEP-1790 resizer", func(t *testing.T) {
		base := Observed{Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimControllerResizeInProgress, PVCap: q("10Gi"), PVCCap: q("10Gi"), Legacy: true}
		o := base
		o.Spec = q("10Gi")
		wantPlan(t, "spec at capacity", PlanExpansion(o), Nothing, "", false, false)
		o.Spec = q("20Gi")
		wantPlan(t, "spec above capacity", PlanExpansion(o), ExpandController, "20Gi", false, false)
		o.State = v1.PersistentVolumeClaimNodeResizePending
		wantPlan(t, "node pending", PlanExpansion(o), ExpandController, "20Gi", false, false)

		st := v1.PersistentVolumeClaimStatus{
			Capacity:                  v1.ResourceList{v1.ResourceStorage: q("10Gi")},
			AllocatedResources:        v1.ResourceList{v1.ResourceStorage: q("100Gi")},
			AllocatedResourceStatuses: map[v1.ResourceName]v1.ClaimResourceStatus{v1.ResourceStorage: v1.PersistentVolumeClaimControllerResizeInProgress},
		}
		p := PlanExpansion(o)
		for name, got := range map[string]v1.PersistentVolumeClaimStatus{
			"started":    StartedStatus(st, p, true, mt(1)),
			"expanded":   ExpandedStatus(st, p, q("20Gi"), false, true, mt(1)),
			"node":       ExpandedStatus(st, p, q("20Gi"), true, true, mt(1)),
			"infeasible": FailedStatus(st, ClassifyError(status.Error(codes.OutOfRange, "x")), true, mt(1)),
			"final":      FailedStatus(st, ClassifyError(status.Error(codes.Internal, "x")), true, mt(1)),
		} {
			if !sameAllocated(st, got) {
				t.Errorf("%s: legacy changed allocated*: %v %v", name, got.AllocatedResources, got.AllocatedResourceStatuses)
			}
		}
	})

	t.Run("node-only driver: expands to spec, never lowers the PV", func(t *testing.T) {
		o := Observed{Spec: q("20Gi"), Alloc: qp("100Gi"), State: v1.PersistentVolumeClaimNodeResizeInfeasible, PVCap: q("100Gi"), PVCCap: q("10Gi"), NodeOnly: true, Legacy: true}
		p := PlanExpansion(o)
		checkPlanInvariants(t, o, p)
		wantPlan(t, "node-only", p, ExpandNodeOnly, "100Gi", false, false)
		// Handed to the node already: the kubelet's turn.
		o.FileSystemResizePending = true
		p = PlanExpansion(o)
		checkPlanInvariants(t, o, p)
		wantPlan(t, "node-only, file system resize pending", p, Nothing, "", false, false)
	})
}

// TestLegacyNothingOnceThePVHasSpec: without RecoverVolumeExpansionFailure, a PV capacity that
// already covers spec together with FileSystemResizePending means the control-plane expansion is
// done and the kubelet has the rest (upstream's pvNeedResize). Expanding again would call
// ControllerExpandVolume and write the status and an event on every resync while the node
// expansion is pending. Without the condition (crash between the PV write and the PVC status
// write) upstream calls the idempotent driver again to finish the PVC; so do we.
func TestLegacyNothingOnceThePVHasSpec(t *testing.T) {
	cases := []struct {
		name   string
		o      Observed
		action Action
		target string
	}{
		{"controller driver, PV at spec, node pending", Observed{Spec: q("2Gi"), PVCap: q("2Gi"), PVCCap: q("1Gi"), FileSystemResizePending: true}, Nothing, ""},
		{"controller driver, PV rounded up above spec, node pending", Observed{Spec: q("2Gi"), PVCap: q("3Gi"), PVCCap: q("1Gi"), FileSystemResizePending: true}, Nothing, ""},
		{"controller driver, PV below spec, node pending: new request", Observed{Spec: q("3Gi"), PVCap: q("2Gi"), PVCCap: q("1Gi"), FileSystemResizePending: true}, ExpandController, "3Gi"},
		{"controller driver, PV at spec, PVC never finished: finish it", Observed{Spec: q("2Gi"), PVCap: q("2Gi"), PVCCap: q("1Gi")}, ExpandController, "2Gi"},
		{"controller driver, PV above spec, PVC never finished: never below the PV", Observed{Spec: q("2Gi"), PVCap: q("3Gi"), PVCCap: q("1Gi")}, ExpandController, "3Gi"},
		{"node-only driver, PV at spec, node pending", Observed{Spec: q("2Gi"), PVCap: q("2Gi"), PVCCap: q("1Gi"), NodeOnly: true, FileSystemResizePending: true}, Nothing, ""},
		{"node-only driver, PV above spec, node pending", Observed{Spec: q("2Gi"), PVCap: q("3Gi"), PVCCap: q("1Gi"), NodeOnly: true, FileSystemResizePending: true}, Nothing, ""},
		{"node-only driver, PV below spec, node pending: new request", Observed{Spec: q("3Gi"), PVCap: q("2Gi"), PVCCap: q("1Gi"), NodeOnly: true, FileSystemResizePending: true}, ExpandNodeOnly, "3Gi"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Legacy = true
			p := PlanExpansion(tc.o)
			checkPlanInvariants(t, tc.o, p)
			wantPlan(t, tc.name, p, tc.action, tc.target, false, false)
		})
	}
}

// TestPlanInvariantsGrid runs every combination of a small set of sizes, states, last errors
// and driver kinds through the decision and checks docs/design.md §2.3's invariants, plus the exact
// target rule 2 prescribes for each state.
func TestPlanInvariantsGrid(t *testing.T) {
	sizes := []string{"0", "10Gi", "20Gi", "100Gi", "200Gi"}
	states := []v1.ClaimResourceStatus{"",
		v1.PersistentVolumeClaimControllerResizeInProgress, v1.PersistentVolumeClaimControllerResizeInfeasible,
		v1.PersistentVolumeClaimNodeResizePending, v1.PersistentVolumeClaimNodeResizeInProgress, v1.PersistentVolumeClaimNodeResizeInfeasible}
	classes := []ErrorClass{ClassNone, ClassTransient, ClassFinal, ClassInfeasible}
	n := 0
	for _, spec := range sizes {
		for _, alloc := range append([]string{""}, sizes...) {
			for _, pvCap := range sizes {
				for _, pvcCap := range sizes {
					for _, state := range states {
						for _, le := range classes {
							for _, nodeOnly := range []bool{false, true} {
								for _, legacy := range []bool{false, true} {
									for _, fsrp := range []bool{false, true} {
										o := Observed{Spec: q(spec), State: state, PVCap: q(pvCap), PVCCap: q(pvcCap), LastError: le, NodeOnly: nodeOnly, Legacy: legacy, FileSystemResizePending: fsrp}
										if alloc != "" {
											o.Alloc = qp(alloc)
										}
										p := PlanExpansion(o)
										checkPlanInvariants(t, o, p)
										checkRule2Target(t, o, p)
										n++
									}
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d combinations", n)
}

// checkRule2Target asserts the target rule 2 and rule 4 prescribe for the KEP-1790 states.
func checkRule2Target(t *testing.T, o Observed, p Plan) {
	t.Helper()
	if o.Legacy {
		// Legacy: expand only when spec is above both capacities; a PV that covers spec means
		// the node has the rest.
		want := Nothing
		if o.Spec.Cmp(o.PVCCap) > 0 && (o.Spec.Cmp(o.PVCap) > 0 || !o.FileSystemResizePending) {
			want = ExpandController
			if o.NodeOnly {
				want = ExpandNodeOnly
			}
		}
		if p.Action != want {
			t.Fatalf("legacy: action %s, want %s (spec=%s pvCap=%s pvcCap=%s fsResizePending=%v)", p.Action, want, o.Spec.String(), o.PVCap.String(), o.PVCCap.String(), o.FileSystemResizePending)
		}
		return
	}
	var want resource.Quantity
	follow := false
	switch {
	case o.State == v1.PersistentVolumeClaimNodeResizePending || o.State == v1.PersistentVolumeClaimNodeResizeInProgress:
		if p.Action != Nothing {
			t.Fatalf("state %s: action %s", o.State, p.Action)
		}
		return
	case o.State == "":
		if o.Spec.Cmp(o.PVCCap) <= 0 {
			if p.Action != Nothing {
				t.Fatalf("no state, spec %s <= capacity %s: action %s", o.Spec.String(), o.PVCCap.String(), p.Action)
			}
			return
		}
		follow = true
	case o.State == v1.PersistentVolumeClaimControllerResizeInfeasible,
		o.State == v1.PersistentVolumeClaimControllerResizeInProgress && o.LastError.IsFinal(),
		o.State == v1.PersistentVolumeClaimNodeResizeInfeasible && o.NodeOnly:
		follow = true
	}
	if follow || o.Alloc == nil {
		want = o.Spec.DeepCopy()
	} else {
		want = o.Alloc.DeepCopy()
	}
	if want.Cmp(o.PVCCap) < 0 {
		want = o.PVCCap.DeepCopy()
	}
	if !isCase2Recovery(o) && want.Cmp(o.PVCap) < 0 {
		want = o.PVCap.DeepCopy()
	}
	if p.Action == Nothing || p.Target.Cmp(want) != 0 {
		t.Fatalf("state %q lastError %q nodeOnly=%v spec=%s alloc=%s pvCap=%s pvcCap=%s: %s to %s, want target %s",
			o.State, o.LastError, o.NodeOnly, o.Spec.String(), quantityPtr(o.Alloc), o.PVCap.String(), o.PVCCap.String(),
			p.Action, p.Target.String(), want.String())
	}
}
