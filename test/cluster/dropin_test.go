//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestDropInSetImage is the product's first promise, literally: in csi-driver-host-path's own
// deployment, `kubectl set image` of the csi-resizer container to this project's image and
// nothing else changed, then a PVC of the driver grows. It reports what the swapped container
// does (its state, exit code and log, the socket's owner and mode as the driver's container
// sees it, the uid the container runs as) and fails if the PVC does not grow. The driver's socket
// is root's with mode 0755: the image's root default connects (docs/security.md).
func TestDropInSetImage(t *testing.T) {
	c := clusterFor(t)
	ctx := context.Background()
	deployHostpathOnce(t, c)
	upstream, err := c.Kubectl(t, "get", "statefulset/csi-hostpathplugin", "-o",
		`jsonpath={.spec.template.spec.containers[?(@.name=="csi-resizer")].image}`)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Back to the manifests' image for whatever runs next on this cluster.
		if _, err := c.Kubectl(t, "set", "image", "statefulset/csi-hostpathplugin", "csi-resizer="+upstream); err != nil {
			t.Error(err)
		}
		_, _ = c.Kubectl(t, "rollout", "status", "statefulset/csi-hostpathplugin", "--timeout=120s")
	})

	t.Logf("kubectl set image statefulset/csi-hostpathplugin csi-resizer=%s (was %s)", c.ProductImage, upstream)
	if _, err := c.Kubectl(t, "set", "image", "statefulset/csi-hostpathplugin", "csi-resizer="+c.ProductImage); err != nil {
		t.Fatal(err)
	}
	// The pod is re-created with the new template; wait until the resizer container is ready,
	// has terminated at least once, or has run for 30s (past its 10s --timeout to reach the
	// driver).
	var st corev1.ContainerStatus
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "csi-hostpathplugin-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == "csi-resizer" && strings.HasSuffix(s.Image, c.ProductImage) {
				st = s
				if s.RestartCount > 0 || s.State.Terminated != nil {
					return true, nil
				}
				return s.Ready || (s.State.Running != nil && time.Since(s.State.Running.StartedAt.Time) > 30*time.Second), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the swapped csi-resizer container neither became ready nor terminated: %v", err)
	}
	c.RequireProductImage(t, "default", hostpathSelector, "csi-resizer")

	socket, _ := c.Kubectl(t, "exec", "csi-hostpathplugin-0", "-c", "hostpath", "--",
		"stat", "-c", "%A %U(%u) %G(%g)", "/csi/csi.sock")
	user, _ := c.InNode(t, "sh", "-c", `pid=$(pgrep -f '^/csi-resizer ' | head -1); [ -n "$pid" ] && grep -E '^(Uid|CapEff)' /proc/$pid/status`)
	// The last finished run's log says how it ended; the current one may not have got that far.
	var logs string
	var logErr error
	if st.RestartCount > 0 {
		logs, logErr = c.Kubectl(t, "logs", "csi-hostpathplugin-0", "-c", "csi-resizer", "--previous", "--tail=5")
	}
	if strings.TrimSpace(logs) == "" {
		logs, logErr = c.Kubectl(t, "logs", "csi-hostpathplugin-0", "-c", "csi-resizer", "--tail=5")
	}
	if strings.TrimSpace(logs) == "" {
		logs = fmt.Sprintf("(none: %v)", logErr)
	}
	state := "running"
	if term := st.State.Terminated; term != nil {
		state = fmt.Sprintf("terminated, exit code %d (%s)", term.ExitCode, term.Reason)
	} else if term := st.LastTerminationState.Terminated; term != nil {
		state = fmt.Sprintf("restarting, last exit code %d (%s)", term.ExitCode, term.Reason)
	}
	t.Logf("swapped csi-resizer container: ready=%v restarts=%d state: %s", st.Ready, st.RestartCount, state)
	t.Logf("driver socket /csi/csi.sock as the driver's container sees it: %s", strings.TrimSpace(socket))
	t.Logf("resizer process (if caught running): %s", strings.Join(strings.Fields(user), " "))
	t.Logf("its log:\n%s", logs)

	// Does it resize?
	pvc := hostpathPVC("", "dropin", "1Gi")
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumeClaims("default").Delete(ctx, pvc.Name, metav1.DeleteOptions{})
	})
	if _, err := c.Kubectl(t, "wait", "--for=jsonpath={.status.phase}=Bound", "pvc/dropin", "--timeout=120s"); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`)
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("default").Patch(ctx, pvc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// No pod uses it: the controller step alone (the PV's capacity) shows the resizer worked.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().PersistentVolumeClaims("default").Get(ctx, pvc.Name, metav1.GetOptions{})
		if err != nil || p.Spec.VolumeName == "" {
			return false, nil
		}
		pv, err := c.Client.CoreV1().PersistentVolumes().Get(ctx, p.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		capacity := pv.Spec.Capacity[corev1.ResourceStorage]
		return capacity.Cmp(resource.MustParse("2Gi")) == 0, nil
	})
	if err != nil {
		t.Fatalf("after the literal drop-in the PV did not grow to 2Gi within 90s: the swapped resizer does not work "+
			"(socket %s, container %s)", strings.TrimSpace(socket), state)
	}
	if st.RestartCount != 0 {
		t.Errorf("the swapped csi-resizer container restarted %d times, want 0 (state: %s)", st.RestartCount, state)
	}
	t.Run("unprivileged user against the root socket", func(t *testing.T) { unprivilegedDropIn(t, c) })
}

// unprivilegedDropIn runs the swapped container as the image's unprivileged user (65532), which
// may not connect to the driver's root 0755 socket: the container must stop with the error
// that says so, naming the socket's owner and mode and its uid (docs/security.md).
func unprivilegedDropIn(t *testing.T, c *Cluster) {
	ctx := context.Background()
	patch := func(sc string) {
		t.Helper()
		p := `{"spec":{"template":{"spec":{"containers":[{"name":"csi-resizer","securityContext":` + sc + `}]}}}}`
		if _, err := c.Kubectl(t, "patch", "statefulset/csi-hostpathplugin", "--type=strategic", "-p", p); err != nil {
			t.Fatal(err)
		}
	}
	patch(`{"runAsUser":65532,"runAsGroup":65532}`)
	t.Cleanup(func() { patch(`{"runAsUser":null,"runAsGroup":null}`) })
	var logs string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods("default").Get(ctx, "csi-hostpathplugin-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name != "csi-resizer" || (s.State.Terminated == nil && s.LastTerminationState.Terminated == nil) {
				continue
			}
			args := []string{"logs", "csi-hostpathplugin-0", "-c", "csi-resizer", "--tail=3"}
			if s.State.Terminated == nil {
				args = append(args, "--previous")
			}
			logs, _ = c.Kubectl(t, args...)
			return strings.Contains(logs, "cannot connect"), nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("csi-resizer as uid 65532 did not stop with the permission error within 2 minutes; its log:\n%s", logs)
	}
	t.Logf("its log:\n%s", logs)
	for _, want := range []string{"permission denied", "/csi/csi.sock", "owned by uid 0 gid 0 with mode Srwxr-xr-x", "runs as uid 65532 gid 65532"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the error does not say %q", want)
		}
	}
}

var hostpathDeployed bool

// hostpathSelector selects csi-driver-host-path's pod (its manifests' label).
const hostpathSelector = "app.kubernetes.io/name=csi-hostpathplugin"

func deployHostpathOnce(t *testing.T, c *Cluster) {
	t.Helper()
	if !hostpathDeployed {
		c.DeployHostpath(t)
		hostpathDeployed = true
	}
}
