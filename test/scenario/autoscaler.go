package scenario

import (
	"path/filepath"
	"testing"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// AutoscalerServiceAccount is the ServiceAccount of deploy/kubernetes/volume-autoscaler.
const AutoscalerServiceAccount = "volume-autoscaler"

// ApplyVolumeAutoscalerRBAC renders deploy/kubernetes/volume-autoscaler in namespace ns (as a
// user does), applies its RBAC objects and ServiceAccount, and returns a kubeconfig of that
// ServiceAccount: a process run with it has exactly the permissions the project ships.
func ApplyVolumeAutoscalerRBAC(t testing.TB, cluster *framework.Cluster, ns string) string {
	t.Helper()
	applyRBAC(t, cluster, ns, filepath.Join("deploy", "kubernetes", "volume-autoscaler"))
	return cluster.ServiceAccountKubeconfig(t, ns, AutoscalerServiceAccount)
}
