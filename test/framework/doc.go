// Package framework runs the csi-resizer integration and e2e tests against
// real processes: etcd, kube-apiserver and (optionally) kube-controller-manager
// on 127.0.0.1, a CSI driver on a unix socket, and the csi-resizer /
// statefulset-resizer binaries, each a separate OS process.
//
// Everything a test starts lives under its temp dirs, listens only on
// loopback ports picked at start, runs in its own process group and is killed
// in t.Cleanup; when the test failed, the cleanup prints the tail of each
// process's log. Nothing here sleeps to "let things settle": callers poll
// with Eventually.
//
// The control-plane binaries are built from the Go module proxy by
// hack/build-k8s-bins.sh (see BinDir); set CSI_RESIZER_K8S_BINS to a directory
// holding etcd, kube-apiserver, kube-controller-manager, kubectl and
// mock-csi-driver to use prebuilt ones.
//
// Tests that need the control plane are built with the "integration" tag
// (`go test -tags integration ./test/...`); this package itself has no tag so
// that the unit run compiles and vets it.
package framework
