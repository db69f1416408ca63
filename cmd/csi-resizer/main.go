// Command csi-resizer is a drop-in replacement for the Kubernetes CSI external-resizer sidecar.
package main

import (
	_ "github.com/container-storage-interface/spec/lib/go/csi"
	_ "github.com/kubernetes-csi/csi-lib-utils/connection"
	_ "github.com/kubernetes-csi/csi-lib-utils/leaderelection"
	_ "github.com/kubernetes-csi/csi-lib-utils/metrics"
	_ "github.com/kubernetes-csi/csi-lib-utils/rpc"
	_ "github.com/kubernetes-csi/csi-lib-utils/slowset"
	_ "github.com/kubernetes-csi/csi-lib-utils/standardflags"
	_ "google.golang.org/grpc"
	_ "k8s.io/client-go/informers"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/client-go/util/workqueue"
	_ "k8s.io/component-base/featuregate"
	_ "k8s.io/component-base/logs"
	_ "k8s.io/component-base/metrics"
	_ "k8s.io/component-base/metrics/testutil"
	_ "k8s.io/klog/v2"
)

func main() {}
