package controller

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/csi-resizer/csi-resizer/pkg/autoscale/policy"
)

var labelsEverything = labels.Everything()

// claimNames returns the PVCs a pod mounts: its persistentVolumeClaim volumes, and its generic
// ephemeral volumes, whose PVC the ephemeral volume controller names <pod>-<volume>.
func claimNames(pod *corev1.Pod) []string {
	var names []string
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			names = append(names, v.PersistentVolumeClaim.ClaimName)
		case v.Ephemeral != nil:
			names = append(names, pod.Name+"-"+v.Name)
		}
	}
	return names
}

// mounting reports whether a pod holds its volumes on a node: scheduled, and not finished
// (the kubelet unmounts the volumes of a pod that succeeded or failed).
func mounting(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// podClaims is the pod index: "namespace/claim" of every PVC the pod mounts.
func podClaims(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("not a pod: %T", obj)
	}
	names := claimNames(pod)
	keys := make([]string, 0, len(names))
	for _, n := range names {
		keys = append(keys, pod.Namespace+"/"+n)
	}
	return keys, nil
}

// claimPrefix is the claimPrefixIndex of a PVC: "namespace/<prefix>" when its name is
// "<prefix><ordinal>" with prefix ending in "-", else none.
func claimPrefix(obj any) ([]string, error) {
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return nil, fmt.Errorf("not a PVC: %T", obj)
	}
	if _, grown := pvc.Annotations[policy.AnnLastResize]; !grown {
		return nil, nil // only a grown sibling sizes a new replica (policy.SiblingSize)
	}
	i := strings.LastIndexByte(pvc.Name, '-')
	if i <= 0 || !isOrdinal(pvc.Name[i+1:]) {
		return nil, nil
	}
	return []string{pvc.Namespace + "/" + pvc.Name[:i+1]}, nil
}

// stripManagedFields drops what nothing here reads and costs memory per object.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// transformPod keeps what the controller reads of a pod: its node, phase, owner and volumes'
// claims. Pods are the largest informer here.
func transformPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	var volumes []corev1.Volume
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.PersistentVolumeClaim != nil:
			volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: v.PersistentVolumeClaim}})
		case v.Ephemeral != nil:
			volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
		}
	}
	return &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, OwnerReferences: pod.OwnerReferences},
		Spec:   corev1.PodSpec{NodeName: pod.Spec.NodeName, Volumes: volumes},
		Status: corev1.PodStatus{Phase: pod.Status.Phase},
	}, nil
}

// transformNode keeps what kubeletstats.Endpoint reads: the addresses and the kubelet port.
func transformNode(obj any) (any, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{
		TypeMeta:   node.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion},
		Status:     corev1.NodeStatus{Addresses: node.Status.Addresses, DaemonEndpoints: node.Status.DaemonEndpoints},
	}, nil
}
