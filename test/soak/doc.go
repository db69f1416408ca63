//go:build integration

// Package soak runs csi-resizer for a long time under random faults on a real control plane
// (etcd, kube-apiserver, kube-controller-manager with the ResourceQuota controller), the mock CSI
// driver and two csi-resizer processes with leader election, records every PVC, PV and Lease
// version and every driver call, and checks the KEP-1790 invariants once the faults stop. It
// runs only with SOAK=1 (`make soak`); docs/reliability.md says what it does and publishes its
// figures.
package soak
