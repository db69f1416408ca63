//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// --node-deployment (docs/design.md §2.12) on the real apiserver, with csi-driver-host-path as
// the node-local driver: three Nodes, one hostpathplugin per node (--nodeid = the node, so its
// topology key topology.hostpath.csi/node is the node's name, as in the driver's distributed
// deployment) and one csi-resizer --node-deployment per node, with the shipped RBAC and its
// node-deployment component.

const (
	hostpathTopologyKey = "topology.hostpath.csi/node"
	zoneKey             = "topology.kubernetes.io/zone"
)

var nodeNames = []string{"node-1", "node-2", "node-3"}

// nodeCluster is the three nodes' drivers and resizers.
type nodeCluster struct {
	*scenario.Env
	drivers  map[string]*framework.Driver
	resizers map[string]*framework.Process
}

func startNodeCluster(t *testing.T) *nodeCluster {
	t.Helper()
	hostpath := scenario.HostpathPlugin(t)
	cmd := func(node string) string {
		return hostpath + " --endpoint={endpoint} --nodeid=" + node + " --statedir={statedir} -v=5" +
			" --enable-controller-modify-volume --accepted-mutable-parameter-names=iops"
	}
	// The env's own driver is node-1's.
	t.Setenv(framework.EnvDriverCmd, cmd(nodeNames[0]))
	t.Setenv(framework.EnvDriverEndpoint, "")
	c := &nodeCluster{Env: scenario.Start(t, scenario.Options{NoResizer: true}), drivers: map[string]*framework.Driver{}, resizers: map[string]*framework.Process{}}
	scenario.ApplyShippedNodeRBAC(t, c.Cluster, c.Namespace)
	for i, node := range nodeNames {
		framework.EnsureNodeWithLabels(t, c.Ctx, c.Client, node, map[string]string{hostpathTopologyKey: node, zoneKey: "z1"})
		c.drivers[node] = c.Driver
		if i > 0 {
			c.drivers[node] = framework.StartExternalDriver(t, framework.ExternalDriverOptions{Command: cmd(node)})
		}
		c.resizers[node] = c.startResizer(t, node)
	}
	return c
}

// startResizer starts node's csi-resizer --node-deployment: node-1's gets its name from
// NODE_NAME, as in the DaemonSet, the others from --node-name. The long --resize-timeout keeps
// a call to a frozen driver in flight until the test kills the resizer.
func (c *nodeCluster) startResizer(t *testing.T, node string) *framework.Process {
	t.Helper()
	args := []string{"--csi-address=" + c.drivers[node].SocketPath, "--kubeconfig=" + c.Kubeconfig, "-v=4",
		"--node-deployment", "--resize-timeout=2m", "--retry-interval-start=200ms"}
	if node != nodeNames[0] {
		args = append(args, "--node-name="+node)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
	p := framework.NewProcess(t, "csi-resizer-"+node, framework.BuildResizer(t), append(args, "--http-endpoint="+addr)...)
	p.HTTPAddr = addr
	if node == nodeNames[0] {
		p.Env = []string{"NODE_NAME=" + node}
	}
	p.Start(t)
	p.WaitHTTP(t, "/metrics", 90*time.Second)
	scenario.FailOnForbidden(t, p)
	return p
}

// claim creates a 1Gi volume on node's driver and a bound PVC for it whose PV has affinity.
func (c *nodeCluster) claim(t *testing.T, name, node string, affinity *v1.VolumeNodeAffinity) string {
	t.Helper()
	id, err := c.drivers[node].CreateVolume(c.Ctx, c.Namespace+"-"+name, gi)
	if err != nil {
		t.Fatal(err)
	}
	framework.CreateBoundClaimWithAffinity(t, c.Ctx, c.Client, c.Namespace, name, c.Driver.Name, id, "1Gi", c.StorageClass, affinity)
	return id
}

func affinityIn(key string, values ...string) *v1.VolumeNodeAffinity {
	return &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchExpressions: []v1.NodeSelectorRequirement{{Key: key, Operator: v1.NodeSelectorOpIn, Values: values}},
	}}}}
}

// nodeStepPending: the controller step is done to size and the node's is pending.
func nodeStepPending(size string) func(*v1.PersistentVolumeClaim) (bool, string) {
	return func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, _, alloc := scenario.Storage(pvc)
		return scenario.State(pvc) == v1.PersistentVolumeClaimNodeResizePending && scenario.Is(alloc, size), "want NodeResizePending at " + size
	}
}

// TestNodeDeployment: each node's instance resizes exactly its node's PVC (the other drivers'
// logs show no call for it) and modifies it; a PV without node affinity and one whose affinity
// a whole zone matches are touched by none, each instance saying why at -v=2; each instance's
// state metrics count only its own volume; an instance killed during a call resumes, once
// restarted, from what the PVC recorded.
func TestNodeDeployment(t *testing.T) {
	c := startNodeCluster(t)
	c.CreateClass(t, "fast", map[string]string{"iops": "3000"})
	vols := map[string]string{}
	for _, node := range nodeNames {
		vols[node] = c.claim(t, "data-"+node, node, affinityIn(hostpathTopologyKey, node))
	}
	anywhere := c.claim(t, "anywhere", nodeNames[0], nil)
	zone := c.claim(t, "zone", nodeNames[0], affinityIn(zoneKey, "z1"))
	for _, name := range []string{"data-node-1", "data-node-2", "data-node-3", "anywhere", "zone"} {
		c.SetRequest(t, name, "2Gi")
	}
	c.SetClass(t, "data-node-3", "fast")
	for _, node := range nodeNames {
		c.WaitClaim(t, "data-"+node, resizeTimeout, nodeStepPending("2Gi"))
		c.FinishNodeExpansion(t, "data-"+node)
		c.WaitClaim(t, "data-"+node, resizeTimeout, scenario.Done("2Gi"))
	}
	c.WaitClaim(t, "data-node-3", modifyTimeout, scenario.ModifiedTo("fast"))

	t.Run("no instance touches a volume no node owns alone", func(t *testing.T) {
		for _, node := range nodeNames {
			p := c.resizers[node]
			framework.Eventually(t, resizeTimeout, func() (bool, string) {
				return p.LogContains(`"Volume left alone by --node-deployment" pvc="`+c.Namespace+`/anywhere"`) &&
						p.LogContains(`"Volume left alone by --node-deployment" pvc="`+c.Namespace+`/zone"`),
					p.Name + " has not said that it leaves anywhere and zone alone"
			})
		}
		for _, name := range []string{"anywhere", "zone"} {
			if pvc := c.PVC(t, name); scenario.State(pvc) != "" || pvc.Status.AllocatedResources != nil || len(pvc.Status.Conditions) != 0 {
				t.Errorf("PVC %s was written by a node instance: %s", name, scenario.Describe(pvc))
			}
		}
	})
	t.Run("each driver is called for its own volume only", func(t *testing.T) {
		for _, node := range nodeNames {
			calls := framework.HostpathExpandCalls(c.drivers[node].Process.Log())
			if len(calls) == 0 {
				t.Errorf("%s's driver got no ControllerExpandVolume call", node)
			}
			for _, id := range calls {
				if id != vols[node] {
					t.Errorf("%s's driver was called for volume %s, want only its own %s (anywhere: %s, zone: %s)", node, id, vols[node], anywhere, zone)
				}
			}
			modifies := strings.Count(c.drivers[node].Process.Log(), "GRPC call: /csi.v1.Controller/ControllerModifyVolume")
			if want := map[bool]int{true: 1, false: 0}[node == "node-3"]; modifies != want {
				t.Errorf("%s's driver got %d ControllerModifyVolume calls, want %d", node, modifies, want)
			}
		}
	})
	t.Run("state metrics count the instance's own volumes", func(t *testing.T) {
		for _, node := range nodeNames {
			if n := scenario.MetricValue(scenario.Scrape(t, c.resizers[node]), "csi_resizer_volumes"); n != 1 {
				t.Errorf("%s: csi_resizer_volumes adds up to %v, want 1 (its own PVC only)", node, n)
			}
		}
	})
	t.Run("killed during a call, restarted, resumes from the PVC", func(t *testing.T) {
		testNodeInstanceKilledDuringCall(t, c)
	})
}

// testNodeInstanceKilledDuringCall: node-2's driver is frozen (SIGSTOP), so the expansion to
// 3Gi stays in flight; the instance is killed meanwhile and the request lowered to 2500Mi (above the
// capacity). The restarted instance keeps the recorded 3Gi (KEP-1790: the outcome of the call is
// unknown, docs/design.md §2.3 rule 2) and finishes it, and no other instance wrote the PVC.
func testNodeInstanceKilledDuringCall(t *testing.T, c *nodeCluster) {
	node, claim := "node-2", "data-node-2"
	driver, resizer := c.drivers[node], c.resizers[node]
	before := len(framework.HostpathExpandCalls(driver.Process.Log()))
	if err := driver.Process.Freeze(); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = driver.Process.Thaw()
		}
	}()
	c.SetRequest(t, claim, "3Gi")
	c.WaitClaim(t, claim, resizeTimeout, func(pvc *v1.PersistentVolumeClaim) (bool, string) {
		_, _, alloc := scenario.Storage(pvc)
		return scenario.State(pvc) == v1.PersistentVolumeClaimControllerResizeInProgress && scenario.Is(alloc, "3Gi"), "want ControllerResizeInProgress at 3Gi"
	})
	if err := resizer.Kill(); err != nil {
		t.Fatal(err)
	}
	c.SetRequest(t, claim, "2500Mi")
	if err := driver.Process.Thaw(); err != nil {
		t.Fatal(err)
	}
	thawed = true
	resizer.Start(t)
	resizer.WaitHTTP(t, "/metrics", 90*time.Second)
	c.WaitClaim(t, claim, resizeTimeout, nodeStepPending("3Gi"))
	c.FinishNodeExpansion(t, claim)
	c.WaitClaim(t, claim, resizeTimeout, scenario.Done("3Gi"))
	// The killed instance's call may never reach the thawed driver (its connection is gone);
	// the restarted instance's does, for the recorded 3Gi, not the lowered request.
	if calls := framework.HostpathExpandCalls(driver.Process.Log()); len(calls) <= before {
		t.Errorf("node-2's driver got no ControllerExpandVolume call after the freeze")
	}
	if !strings.Contains(driver.Process.Log(), fmt.Sprintf(`"required_bytes":%d`, 3*gi)) {
		t.Errorf("node-2's driver was never asked for 3Gi")
	}
	for _, other := range []string{"node-1", "node-3"} {
		for _, id := range framework.HostpathExpandCalls(c.drivers[other].Process.Log()) {
			if id == c.PV(t, c.PVC(t, claim).Spec.VolumeName).Spec.CSI.VolumeHandle {
				t.Errorf("%s's driver was called for node-2's volume", other)
			}
		}
	}
}

// TestNodeDeploymentUnknownNode: a node name that names no Node (a typo in --node-name, a
// NODE_NAME not from the downward API) stops the instance at start with one line naming the
// Node and the flag, instead of leaving every volume alone without a word.
func TestNodeDeploymentUnknownNode(t *testing.T) {
	e := startMock(t, scenario.Options{NoResizer: true})
	scenario.ApplyShippedNodeRBAC(t, e.Cluster, e.Namespace)
	p := framework.StartResizer(t, e.Cluster, e.Kubeconfig, e.Driver, "--node-deployment", "--node-name=no-such-node")
	_ = p.WaitExit(time.Minute) // its error is the exit status, checked next
	if exited, _ := p.Exited(); !exited {
		t.Fatalf("still running with an unknown node:\n%s", p.LogTail(10))
	}
	if code := p.ExitCode(); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if !p.LogContains(`--node-deployment: reading Node no-such-node (--node-name, or NODE_NAME)`) || !p.LogContains("not found") {
		t.Errorf("no line names the missing Node and the flag:\n%s", p.LogTail(10))
	}
}
