package scenario

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// ApplyShippedNodeRBAC applies deploy/kubernetes/rbac with its node-deployment component into
// namespace ns, as a user of --node-deployment installs them (the component binds the base's
// ServiceAccount, so it is rendered with the base; applying the base again changes nothing).
func ApplyShippedNodeRBAC(t testing.TB, cluster *framework.Cluster, ns string) {
	t.Helper()
	rbac := filepath.Join("deploy", "kubernetes", "rbac")
	rendered := renderInNamespace(t, cluster, ns, rbac, filepath.Join(rbac, "node-deployment"))
	if out, err := cluster.KubectlWithInput(t, rendered, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the csi-resizer RBAC with node-deployment: %v\n%s", err, out)
	}
}

// HostpathPlugin is the path of csi-driver-host-path's hostpathplugin: $HOSTPATH_PLUGIN, else
// the anchor next to the clone (../shared/anchors/hostpathplugin, as the Makefile's). Without it
// the test is skipped, except in CI (CI=true), which must run it.
func HostpathPlugin(t testing.TB) string {
	t.Helper()
	path := os.Getenv("HOSTPATH_PLUGIN")
	if path == "" {
		root, err := framework.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(root, "..", "shared", "anchors", "hostpathplugin")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		msg := "csi-driver-host-path's hostpathplugin not found at " + abs + " (set HOSTPATH_PLUGIN)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI=true: it must run")
		}
		t.Skip(msg)
	}
	return abs
}
