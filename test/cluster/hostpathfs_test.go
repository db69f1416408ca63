//go:build cluster

package cluster

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// hostpathSmallFS runs hack/cluster/hostpath-small-fs.sh with args on c (its CLUSTER_NAME and
// CLUSTER_DIR): the file system the README's walk-through gives csi-driver-host-path's data
// directory (`make cluster-hostpath-small-fs`) is the one TestVolumeAutoscaler runs on, so the
// test checks the script. The error carries the script's last lines.
func hostpathSmallFS(c *Cluster, args ...string) (string, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.Command("bash", append([]string{filepath.Join(root, "hack", "cluster", "hostpath-small-fs.sh")}, args...)...)
	cmd.Dir = root
	cmd.Env = c.opts.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("hack/cluster/hostpath-small-fs.sh %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 30))
	}
	return string(out), nil
}
