//go:build integration

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/csi-resizer/csi-resizer/test/framework"
	"github.com/csi-resizer/csi-resizer/test/scenario"
)

// nonroot is the image's unprivileged user (docs/security.md).
var nonroot = &syscall.Credential{Uid: 65532, Gid: 65532}

// TestSocketPermissions: the two ways to run csi-resizer next to a driver (docs/security.md),
// with csi-driver-host-path's real process.
//   - A driver that runs as root creates its socket root:root 0755 (as in its own pod). A
//     csi-resizer running as 65532 may not connect: it exits at once (though --timeout is long)
//     with an error that says permission denied and names the socket's owner and mode and its
//     own uid, instead of "no CSI driver answered" after --timeout.
//   - The hardened setup: driver and resizer share the unprivileged user (a pod-level
//     runAsUser), and the resizer expands a volume as 65532.
//
// The root default of the image (the literal drop-in next to a root driver) is
// test/cluster's TestDropInSetImage, in a real pod.
func TestSocketPermissions(t *testing.T) {
	hostpath := scenario.HostpathPlugin(t)
	e := startMock(t, scenario.Options{NoResizer: true})
	cmd := hostpath + " --endpoint={endpoint} --nodeid=socket-node --statedir={statedir} -v=3"
	binary, kubeconfig := readableByAll(t, framework.BuildResizer(t)), readableByAll(t, e.Kubeconfig)

	t.Run("root socket, unprivileged resizer", func(t *testing.T) {
		driver := framework.StartExternalDriver(t, framework.ExternalDriverOptions{Command: cmd})
		framework.Eventually(t, 30*time.Second, func() (bool, string) {
			_, err := os.Stat(driver.SocketPath)
			return err == nil, "no socket yet"
		})
		// The driver's socket dir as a pod's emptyDir is: searchable by everyone.
		if err := os.Chmod(filepath.Dir(driver.SocketPath), 0o777); err != nil {
			t.Fatal(err)
		}
		p := framework.NewProcess(t, "csi-resizer", binary, "--csi-address="+driver.SocketPath,
			"--kubeconfig="+kubeconfig, "--timeout=10m", "--http-endpoint=127.0.0.1:0")
		p.Credential = nonroot
		p.Start(t)
		select {
		case <-p.Done():
		case <-time.After(time.Minute):
			t.Fatalf("csi-resizer as uid 65532 against a root 0755 socket did not exit within a minute (--timeout=10m):\n%s", p.LogTail(10))
		}
		if p.ExitCode() == 0 {
			t.Errorf("csi-resizer exited 0 without a driver connection:\n%s", p.LogTail(10))
		}
		log := p.Log()
		for _, want := range []string{"permission denied", driver.SocketPath, "owned by uid 0 gid 0 with mode Srwxr-xr-x",
			"runs as uid 65532 gid 65532", "runAsUser: 0", "docs/security.md"} {
			if !strings.Contains(log, want) {
				t.Errorf("the error does not say %q:\n%s", want, p.LogTail(10))
			}
		}
		if strings.Contains(log, "no CSI driver answered") {
			t.Errorf("the error still says no driver answered:\n%s", p.LogTail(10))
		}
	})

	t.Run("driver and resizer share an unprivileged user", func(t *testing.T) {
		e.Driver = framework.StartExternalDriver(t, framework.ExternalDriverOptions{Command: cmd, Credential: nonroot})
		e.NewClaim(t, "hardened", "1Gi")
		addr := fmt.Sprintf("127.0.0.1:%d", framework.FreePort(t))
		p := framework.NewProcess(t, "csi-resizer", binary, "--csi-address="+e.Driver.SocketPath,
			"--kubeconfig="+kubeconfig, "--leader-election-namespace="+e.Namespace, "--http-endpoint="+addr, "-v=2")
		p.Credential, p.HTTPAddr = nonroot, addr
		p.Start(t)
		p.WaitHTTP(t, "/metrics", 90*time.Second)
		e.SetRequest(t, "hardened", "2Gi")
		// hostpath asks for a node step; the controller step, done as 65532, is what counts here.
		e.WaitClaim(t, "hardened", resizeTimeout, scenario.InState(v1.PersistentVolumeClaimNodeResizePending))
		if capacity := e.PV(t, e.PVC(t, "hardened").Spec.VolumeName).Spec.Capacity[v1.ResourceStorage]; !scenario.Is(capacity, "2Gi") {
			t.Errorf("PV capacity %s after the controller step, want 2Gi", capacity.String())
		}
	})
}

// readableByAll copies file into a directory every user may enter, readable and executable
// by all, for a process run as another user.
func readableByAll(t *testing.T, file string) string {
	t.Helper()
	dir := t.TempDir()
	framework.MakeReachable(t, dir)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(file))
	if err := os.WriteFile(out, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}
