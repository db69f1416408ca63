package framework

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// DefaultNodeName is the Node MarkPodRunning schedules pods on.
const DefaultNodeName = "node-1"

// Annotations the PV controller uses to record a finished binding; writing
// them ourselves makes a running PV controller see the pair as already bound.
const (
	annBindCompleted = "pv.kubernetes.io/bind-completed"
	annBoundByCtrl   = "pv.kubernetes.io/bound-by-controller"
)

// CreateNamespace creates a namespace named prefix-<random> and its "default"
// service account (normally made by kube-controller-manager, which most tests
// do not run; the ServiceAccount admission plugin rejects pods without it).
func CreateNamespace(t testing.TB, ctx context.Context, client kubernetes.Interface, prefix string) string {
	t.Helper()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "default"}}
	if _, err := client.CoreV1().ServiceAccounts(ns.Name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create default service account in %s: %v", ns.Name, err)
	}
	return ns.Name
}

// EnsureStorageClass creates the StorageClass name for driverName with
// allowVolumeExpansion if it does not exist.
func EnsureStorageClass(t testing.TB, ctx context.Context, client kubernetes.Interface, name, driverName string) *storagev1.StorageClass {
	t.Helper()
	sc, err := client.StorageV1().StorageClasses().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return sc
	}
	if !apierrors.IsNotFound(err) {
		t.Fatalf("get storage class %s: %v", name, err)
	}
	sc, err = client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: name},
		Provisioner:          driverName,
		AllowVolumeExpansion: ptr.To(true),
		// Retain: a running PV controller must not try to delete volumes
		// through a provisioner that does not exist here.
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		sc, err = client.StorageV1().StorageClasses().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		t.Fatalf("create storage class %s: %v", name, err)
	}
	return sc
}

// CreateBoundClaim creates a bound PVC/PV pair for an existing CSI volume,
// as the provisioner and the PV controller would leave it: a StorageClass
// with allowVolumeExpansion (if missing), a CSI PV (volumeHandle volumeID,
// capacity size, claimRef to the PVC) and the PVC (request size,
// volumeName), then status Bound with status.capacity = size on both. It
// works with and without kube-controller-manager: it writes exactly what the
// PV controller would, so a running one has nothing left to do (and any
// write it races with is retried). The PV is named <namespace>-<name>.
func CreateBoundClaim(t testing.TB, ctx context.Context, client kubernetes.Interface, ns, name, driverName, volumeID, size, storageClass string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	t.Helper()
	src := corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
		Driver:       driverName,
		VolumeHandle: volumeID,
		FSType:       "ext4",
	}}
	return CreateBoundClaimWithSource(t, ctx, client, ns, name, driverName, src, size, storageClass, nil)
}

// CreateBoundClaimWithSource is CreateBoundClaim for a PV with any volume source (an in-tree
// awsElasticBlockStore, say) and a PVC created with claimAnnotations. driverName names the
// storage class's provisioner and the PV's provisioned-by annotation.
func CreateBoundClaimWithSource(t testing.TB, ctx context.Context, client kubernetes.Interface, ns, name, driverName string, src corev1.PersistentVolumeSource, size, storageClass string, claimAnnotations map[string]string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	t.Helper()
	return createBoundClaim(t, ctx, client, ns, name, driverName, src, size, storageClass, claimAnnotations, nil)
}

// CreateBoundClaimWithAffinity is CreateBoundClaim for a PV with the node affinity affinity (a
// node-local volume), nil for none.
func CreateBoundClaimWithAffinity(t testing.TB, ctx context.Context, client kubernetes.Interface, ns, name, driverName, volumeID, size, storageClass string, affinity *corev1.VolumeNodeAffinity) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	t.Helper()
	src := corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driverName, VolumeHandle: volumeID, FSType: "ext4"}}
	return createBoundClaim(t, ctx, client, ns, name, driverName, src, size, storageClass, nil, affinity)
}

func createBoundClaim(t testing.TB, ctx context.Context, client kubernetes.Interface, ns, name, driverName string, src corev1.PersistentVolumeSource, size, storageClass string, claimAnnotations map[string]string, affinity *corev1.VolumeNodeAffinity) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	t.Helper()
	qty, err := resource.ParseQuantity(size)
	if err != nil {
		t.Fatalf("size %q: %v", size, err)
	}
	EnsureStorageClass(t, ctx, client, storageClass, driverName)
	pvName := ns + "-" + name
	accessModes := []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}

	// The PV first, pre-bound by name only: the PVC's UID is not known yet,
	// and a PV controller treats a claimRef without UID as "finish binding
	// to this claim" rather than as a conflict.
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        pvName,
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": driverName},
		},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: qty},
			AccessModes:                   accessModes,
			PersistentVolumeSource:        src,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: name},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              storageClass,
			VolumeMode:                    ptr.To(corev1.PersistentVolumeFilesystem),
			NodeAffinity:                  affinity,
		},
	}
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PV %s: %v", pvName, err)
	}

	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: claimAnnotations},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      accessModes,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: qty}},
			VolumeName:       pvName,
			StorageClassName: ptr.To(storageClass),
			VolumeMode:       ptr.To(corev1.PersistentVolumeFilesystem),
		},
	}
	created, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create PVC %s/%s: %v", ns, name, err)
	}
	uid := created.UID

	pvs := client.CoreV1().PersistentVolumes()
	pvcs := client.CoreV1().PersistentVolumeClaims(ns)
	steps := []struct {
		what string
		fn   func() error
	}{
		{"PV claimRef.uid", func() error {
			cur, err := pvs.Get(ctx, pvName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Spec.ClaimRef != nil && cur.Spec.ClaimRef.UID == uid {
				return nil
			}
			cur.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: name, UID: uid}
			_, err = pvs.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}},
		{"PV status Bound", func() error {
			cur, err := pvs.Get(ctx, pvName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Status.Phase == corev1.VolumeBound {
				return nil
			}
			cur.Status.Phase = corev1.VolumeBound
			_, err = pvs.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		}},
		{"PVC bind annotations", func() error {
			cur, err := pvcs.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Annotations[annBindCompleted] == "yes" {
				return nil
			}
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations[annBindCompleted] = "yes"
			cur.Annotations[annBoundByCtrl] = "yes"
			_, err = pvcs.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}},
		{"PVC status Bound", func() error {
			cur, err := pvcs.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Status.Phase == corev1.ClaimBound && cur.Status.Capacity.Storage().Cmp(qty) == 0 {
				return nil
			}
			cur.Status.Phase = corev1.ClaimBound
			cur.Status.AccessModes = accessModes
			cur.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: qty}
			_, err = pvcs.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		}},
	}
	for _, s := range steps {
		if err := retryOnConflict(ctx, s.fn); err != nil {
			t.Fatalf("bind %s/%s: %s: %v", ns, name, s.what, err)
		}
	}

	outPVC, err := pvcs.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	outPV, err := pvs.Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return outPVC, outPV
}

// retryOnConflict runs fn until it does not return a conflict (a concurrent
// writer, e.g. the PV controller, changed the object), for up to 30 s.
// fn must re-read the object each time.
func retryOnConflict(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := fn()
		if err == nil || !apierrors.IsConflict(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// EnsureNodeWithLabels is EnsureNode with labels added to the Node's (its topology labels, as
// a kubelet sets them from its CSI drivers' NodeGetInfo).
func EnsureNodeWithLabels(t testing.TB, ctx context.Context, client kubernetes.Interface, name string, labels map[string]string) *corev1.Node {
	t.Helper()
	EnsureNode(t, ctx, client, name)
	var node *corev1.Node
	err := retryOnConflict(ctx, func() error {
		cur, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for k, v := range labels {
			cur.Labels[k] = v
		}
		node, err = client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("label node %s: %v", name, err)
	}
	return node
}

// EnsureNode creates a Node named name with a Ready condition if it does not
// exist (there is no kubelet to register one). Node status is written once;
// with the node lifecycle controller off (DefaultControllers) nobody changes it.
func EnsureNode(t testing.TB, ctx context.Context, client kubernetes.Interface, name string) *corev1.Node {
	t.Helper()
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return node
	}
	if !apierrors.IsNotFound(err) {
		t.Fatalf("get node %s: %v", name, err)
	}
	node, err = client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
	}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return EnsureNode(t, ctx, client, name)
	}
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	// kube-controller-manager (taint and CIDR controllers) may update the new node at the same
	// time: re-read and retry on conflict.
	err = retryOnConflict(ctx, func() error {
		cur, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		setFakeNodeStatus(cur)
		node, err = client.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("node %s status: %v", name, err)
	}
	return node
}

// setFakeNodeStatus makes a node look like a Ready kubelet reported it.
func setFakeNodeStatus(node *corev1.Node) {
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "faked by the test framework", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Capacity: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("250"),
		},
		Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("250"),
		},
	}
}

// MarkPodRunning plays the scheduler and the kubelet for pod: binds it to
// its spec.nodeName or DefaultNodeName (creating the Node), then writes
// status Running with all containers running and ready through the status
// subresource. It returns the updated pod.
func MarkPodRunning(t testing.TB, ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	pods := client.CoreV1().Pods(pod.Namespace)
	nodeName := pod.Spec.NodeName
	if nodeName == "" {
		nodeName = DefaultNodeName
	}
	EnsureNode(t, ctx, client, nodeName)
	if pod.Spec.NodeName == "" {
		err := pods.Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName},
		}, metav1.CreateOptions{})
		// Conflict: already bound, e.g. by an earlier call.
		if err != nil && !apierrors.IsConflict(err) {
			t.Fatalf("bind pod %s/%s to %s: %v", pod.Namespace, pod.Name, nodeName, err)
		}
	}
	var out *corev1.Pod
	err := retryOnConflict(ctx, func() error {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		cond := func(ct corev1.PodConditionType) corev1.PodCondition {
			return corev1.PodCondition{Type: ct, Status: corev1.ConditionTrue, LastTransitionTime: now}
		}
		cur.Status.Phase = corev1.PodRunning
		cur.Status.Conditions = []corev1.PodCondition{
			cond(corev1.PodScheduled), cond(corev1.PodInitialized), cond(corev1.ContainersReady), cond(corev1.PodReady),
		}
		if cur.Status.StartTime == nil {
			cur.Status.StartTime = &now
		}
		cur.Status.HostIP = "127.0.0.1"
		cur.Status.ContainerStatuses = nil
		for _, c := range cur.Spec.Containers {
			cur.Status.ContainerStatuses = append(cur.Status.ContainerStatuses, corev1.ContainerStatus{
				Name:         c.Name,
				Image:        c.Image,
				ImageID:      "faked://" + c.Image,
				ContainerID:  "faked://" + string(cur.UID) + "/" + c.Name,
				Ready:        true,
				Started:      ptr.To(true),
				State:        corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
				RestartCount: 0,
			})
		}
		out, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("mark pod %s/%s running: %v", pod.Namespace, pod.Name, err)
	}
	return out
}

// CreatePodWithClaim creates a pod in ns that mounts the PVC claimName (one
// pause container) and marks it Running on DefaultNodeName.
func CreatePodWithClaim(t testing.TB, ctx context.Context, client kubernetes.Interface, ns, name, claimName string) *corev1.Pod {
	t.Helper()
	pod, err := client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName: DefaultNodeName,
			Containers: []corev1.Container{{
				Name:         "app",
				Image:        "registry.k8s.io/pause:3.10",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{
				Name:         "data",
				VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	return MarkPodRunning(t, ctx, client, pod)
}

// DeletePod deletes a pod immediately (grace period 0: there is no kubelet to
// confirm a graceful termination) and waits until it is gone.
func DeletePod(t testing.TB, ctx context.Context, client kubernetes.Interface, ns, name string) {
	t.Helper()
	err := client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete pod %s/%s: %v", ns, name, err)
	}
	Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("pod %s/%s still exists (err=%v)", ns, name, err)
	})
}

// DeleteClaim deletes a PVC and waits until it is gone. It removes the
// kubernetes.io/pvc-protection finalizer, which only the (usually absent)
// kube-controller-manager would otherwise remove.
func DeleteClaim(t testing.TB, ctx context.Context, client kubernetes.Interface, ns, name string) {
	t.Helper()
	pvcs := client.CoreV1().PersistentVolumeClaims(ns)
	if err := pvcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete PVC %s/%s: %v", ns, name, err)
	}
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := pvcs.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("remove finalizers of PVC %s/%s: %v", ns, name, err)
	}
	Eventually(t, 30*time.Second, func() (bool, string) {
		_, err := pvcs.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		return false, fmt.Sprintf("PVC %s/%s still exists (err=%v)", ns, name, err)
	})
}

// ClaimCondition returns the PVC's condition of type ct, or nil.
func ClaimCondition(pvc *corev1.PersistentVolumeClaim, ct corev1.PersistentVolumeClaimConditionType) *corev1.PersistentVolumeClaimCondition {
	for i := range pvc.Status.Conditions {
		if pvc.Status.Conditions[i].Type == ct {
			return &pvc.Status.Conditions[i]
		}
	}
	return nil
}

// DescribeClaim is a one-line summary of a PVC's resize-relevant fields, for
// Eventually messages.
func DescribeClaim(pvc *corev1.PersistentVolumeClaim) string {
	var conds []string
	for _, c := range pvc.Status.Conditions {
		conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	req := pvc.Spec.Resources.Requests[corev1.ResourceStorage]
	capQ := pvc.Status.Capacity[corev1.ResourceStorage]
	alloc := pvc.Status.AllocatedResources[corev1.ResourceStorage]
	return fmt.Sprintf("%s/%s phase=%s request=%s capacity=%s allocated=%s state=%q conditions=[%s]",
		pvc.Namespace, pvc.Name, pvc.Status.Phase, req.String(), capQ.String(), alloc.String(),
		pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage], strings.Join(conds, "; "))
}
