// Package k8se2e pins the Kubernetes release whose own end-to-end tests (e2e.test) and test
// image sources (agnhost) hack/build-k8s-e2e.sh builds from the Go module proxy. It is a
// separate module so that the main module's vendor tree never sees these dependencies.
package k8se2e
