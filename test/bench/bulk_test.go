//go:build integration

package bench

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/csi-resizer/csi-resizer/test/framework"
)

// bulkConcurrency is how many create/update requests are in flight while objects are made.
const bulkConcurrency = 32

// bulkClient is an admin client without client-side throttling, for creating objects fast.
func bulkClient(c *framework.Cluster) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 10000, 10000
	cfg.UserAgent = "csi-resizer-bench"
	return kubernetes.NewForConfig(cfg)
}

// pair is one bound PVC/PV pair made by createPairs.
type pair struct {
	PVC string
	PV  string
}

// pairSpec says what createPairs makes.
type pairSpec struct {
	Namespace    string
	Driver       string
	StorageClass string
	Size         string
	// Prefix names the PVCs <Prefix>-<i> (a StatefulSet's claim names are
	// <template>-<set>-<ordinal>).
	Prefix string
	// VolumeIDs are the PVs' volume handles; past its end, or where empty, made-up handles are
	// used (fine for objects the driver is never called for).
	VolumeIDs []string
	// Affinity is the node affinity of the i-th PV; nil: every PV in zone-a.
	Affinity func(i int) *v1.VolumeNodeAffinity
}

// createPairs creates n bound PVC/PV pairs shaped like the ones a CSI provisioner and the PV
// controller leave for a StatefulSet's claims: 4 writes per pair (PVC create with its final
// spec, PV create with a full claimRef, PVC status Bound with capacity, PV status Bound),
// bulkConcurrency at a time. The shape is what makes the informer cache's size realistic:
//
//   - PVC: 2 labels, the 4 annotations of the PV controller and the provisioner, the
//     pvc-protection finalizer (added by admission), managedFields of kube-controller-manager.
//   - PV: the provisioner's 3 annotations, its finalizer plus pv-protection, a csi source with
//     fsType and 2 volumeAttributes (csiProvisionerIdentity and a driver parameter), a zone
//     nodeAffinity, managedFields of csi-provisioner and kube-controller-manager.
func createPairs(ctx context.Context, client kubernetes.Interface, s pairSpec, n int) ([]pair, error) {
	qty, err := resource.ParseQuantity(s.Size)
	if err != nil {
		return nil, err
	}
	out := make([]pair, n)
	err = parallel(n, bulkConcurrency, func(i int) error {
		p, err := createPair(ctx, client, s, qty, i)
		out[i] = p
		return err
	})
	return out, err
}

func createPair(ctx context.Context, client kubernetes.Interface, s pairSpec, qty resource.Quantity, i int) (pair, error) {
	name := fmt.Sprintf("%s-%d", s.Prefix, i)
	pvName := "pvc-" + uuid()
	handle := fmt.Sprintf("vol-%s-%d", s.Namespace, i)
	if i < len(s.VolumeIDs) && s.VolumeIDs[i] != "" {
		handle = s.VolumeIDs[i]
	}
	rwo := []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.Namespace, Name: name,
			Labels: map[string]string{"app": "web", "app.kubernetes.io/name": "web"},
			Annotations: map[string]string{
				"pv.kubernetes.io/bind-completed":               "yes",
				"pv.kubernetes.io/bound-by-controller":          "yes",
				"volume.beta.kubernetes.io/storage-provisioner": s.Driver,
				"volume.kubernetes.io/storage-provisioner":      s.Driver,
			},
		},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes:      rwo,
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: qty}},
			VolumeName:       pvName,
			StorageClassName: ptr.To(s.StorageClass),
			VolumeMode:       ptr.To(v1.PersistentVolumeFilesystem),
		},
	}
	pvcs := client.CoreV1().PersistentVolumeClaims(s.Namespace)
	created, err := pvcs.Create(ctx, pvc, metav1.CreateOptions{FieldManager: "kube-controller-manager"})
	if err != nil {
		return pair{}, fmt.Errorf("create PVC %s: %w", name, err)
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name: pvName,
			Annotations: map[string]string{
				"pv.kubernetes.io/provisioned-by":                            s.Driver,
				"volume.kubernetes.io/provisioner-deletion-secret-name":      "",
				"volume.kubernetes.io/provisioner-deletion-secret-namespace": "",
			},
			Finalizers: []string{"external-provisioner.volume.kubernetes.io/finalizer"},
		},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: qty},
			AccessModes: rwo,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver:       s.Driver,
				VolumeHandle: handle,
				FSType:       "ext4",
				VolumeAttributes: map[string]string{
					"storage.kubernetes.io/csiProvisionerIdentity": "1763780000000-8081-" + s.Driver,
					"type": "ssd",
				},
			}},
			ClaimRef: &v1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: s.Namespace, Name: name,
				UID: created.UID, ResourceVersion: created.ResourceVersion,
			},
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			StorageClassName:              s.StorageClass,
			VolumeMode:                    ptr.To(v1.PersistentVolumeFilesystem),
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
				MatchExpressions: []v1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: v1.NodeSelectorOpIn, Values: []string{"zone-a"}}},
			}}}},
		},
	}
	if s.Affinity != nil {
		pv.Spec.NodeAffinity = s.Affinity(i)
	}
	pvs := client.CoreV1().PersistentVolumes()
	createdPV, err := pvs.Create(ctx, pv, metav1.CreateOptions{FieldManager: "csi-provisioner"})
	if err != nil {
		return pair{}, fmt.Errorf("create PV %s: %w", pvName, err)
	}
	// A running PV controller (kube-controller-manager) may write the objects meanwhile: on a
	// conflict, write the status again over the latest version.
	claimStatus := v1.PersistentVolumeClaimStatus{Phase: v1.ClaimBound, AccessModes: rwo, Capacity: v1.ResourceList{v1.ResourceStorage: qty}}
	err = retryConflict(ctx, func() error {
		created.Status = claimStatus
		_, err := pvcs.UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: "kube-controller-manager"})
		if apierrors.IsConflict(err) {
			if latest, gerr := pvcs.Get(ctx, name, metav1.GetOptions{}); gerr == nil {
				created = latest
			}
		}
		return err
	})
	if err != nil {
		return pair{}, fmt.Errorf("PVC %s status: %w", name, err)
	}
	err = retryConflict(ctx, func() error {
		createdPV.Status = v1.PersistentVolumeStatus{Phase: v1.VolumeBound}
		_, err := pvs.UpdateStatus(ctx, createdPV, metav1.UpdateOptions{FieldManager: "kube-controller-manager"})
		if apierrors.IsConflict(err) {
			if latest, gerr := pvs.Get(ctx, pvName, metav1.GetOptions{}); gerr == nil {
				createdPV = latest
			}
		}
		return err
	})
	if err != nil {
		return pair{}, fmt.Errorf("PV %s status: %w", pvName, err)
	}
	return pair{PVC: name, PV: pvName}, nil
}

// retryConflict runs fn until it returns something other than a conflict (fn re-reads the
// object on a conflict), at most 20 times.
func retryConflict(ctx context.Context, fn func() error) error {
	var err error
	for range 20 {
		if err = fn(); !apierrors.IsConflict(err) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

// createPods creates one Running pod per claim, shaped like a StatefulSet's pod (labels, owner
// reference, one container with ports, env, resources and the volume mount, the service
// account token volume added by admission; status with conditions, IPs and a container
// status): 2 writes per pod.
func createPods(ctx context.Context, client kubernetes.Interface, ns string, claims []string, node string) error {
	return createPodsNamed(ctx, client, ns, claims, node, "web")
}

// createPodsNamed is createPods with the pods named <prefix>-<i>.
func createPodsNamed(ctx context.Context, client kubernetes.Interface, ns string, claims []string, node, prefix string) error {
	return createPodsPlaced(ctx, client, ns, claims, func(int) string { return node }, prefix)
}

// benchStatefulSet is the StatefulSet every benchmark pod names as its controller.
const benchStatefulSet = "web"

// createPodsPlaced is createPodsNamed with the i-th pod on node nodeOf(i).
func createPodsPlaced(ctx context.Context, client kubernetes.Interface, ns string, claims []string, nodeOf func(i int) string, prefix string) error {
	setUID := types.UID(uuid())
	return parallel(len(claims), bulkConcurrency, func(i int) error {
		name := fmt.Sprintf("%s-%d", prefix, i)
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ns, Name: name,
				Labels: map[string]string{
					"app": "web", "controller-revision-hash": "web-5d8f7c9b6d",
					"statefulset.kubernetes.io/pod-name": name, "apps.kubernetes.io/pod-index": strconv.Itoa(i),
				},
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "apps/v1", Kind: "StatefulSet", Name: benchStatefulSet, UID: setUID,
					Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
				}},
			},
			Spec: v1.PodSpec{
				NodeName:  nodeOf(i),
				Hostname:  name,
				Subdomain: "web",
				Containers: []v1.Container{{
					Name:  "app",
					Image: "registry.k8s.io/nginx-slim:0.27",
					Ports: []v1.ContainerPort{{Name: "web", ContainerPort: 80, Protocol: v1.ProtocolTCP}},
					Env: []v1.EnvVar{
						{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						{Name: "LOG_LEVEL", Value: "info"},
					},
					Resources: v1.ResourceRequirements{Requests: v1.ResourceList{
						v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("128Mi"),
					}},
					VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/usr/share/nginx/html"}},
				}},
				Volumes: []v1.Volume{{
					Name:         "data",
					VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: claims[i]}},
				}},
			},
		}
		pods := client.CoreV1().Pods(ns)
		created, err := pods.Create(ctx, pod, metav1.CreateOptions{FieldManager: "kube-controller-manager"})
		if err != nil {
			return fmt.Errorf("create pod %s: %w", name, err)
		}
		now := metav1.NewTime(time.Now())
		cond := func(t v1.PodConditionType) v1.PodCondition {
			return v1.PodCondition{Type: t, Status: v1.ConditionTrue, LastTransitionTime: now}
		}
		ip := fmt.Sprintf("10.%d.%d.%d", 64+i>>16&63, i>>8&255, i&255)
		created.Status = v1.PodStatus{
			Phase:      v1.PodRunning,
			Conditions: []v1.PodCondition{cond(v1.PodReadyToStartContainers), cond(v1.PodInitialized), cond(v1.PodReady), cond(v1.ContainersReady), cond(v1.PodScheduled)},
			HostIP:     "192.168.0.10", HostIPs: []v1.HostIP{{IP: "192.168.0.10"}},
			PodIP: ip, PodIPs: []v1.PodIP{{IP: ip}},
			StartTime: &now,
			QOSClass:  v1.PodQOSBurstable,
			ContainerStatuses: []v1.ContainerStatus{{
				Name: "app", Ready: true, Started: ptr.To(true),
				State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}},
				Image:       "registry.k8s.io/nginx-slim:0.27",
				ImageID:     "registry.k8s.io/nginx-slim@sha256:a8e35a5a5bfa1e16c8f3d9e0d6f4a8f1c2b3d4e5f60718293a4b5c6d7e8f9012",
				ContainerID: "containerd://" + uuid() + uuid(),
			}},
		}
		if _, err := pods.UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: "kubelet"}); err != nil {
			return fmt.Errorf("pod %s status: %w", name, err)
		}
		return nil
	})
}

// uuid is a random RFC 4122 version 4 UUID.
func uuid() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
