// Module images assembles the one-node cluster's container images offline (hack/cluster/build-images.sh):
// the image assembler (go-containerregistry, no registry, no Docker engine), a pause binary,
// and stand-ins for the three kubernetes-csi sidecars the Go module proxy does not serve. A
// nested module so that the main module's vendor tree stays as it is.
module github.com/csi-resizer/csi-resizer/test/images

go 1.26.0

require (
	github.com/container-storage-interface/spec v1.9.0
	github.com/google/go-containerregistry v0.22.1
	google.golang.org/grpc v1.79.3
	k8s.io/kubelet v0.36.3
)

require (
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/net v0.49.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.33.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260128011058-8636f8732409 // indirect
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af // indirect
)
