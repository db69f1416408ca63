// Module images assembles the one-node cluster's container images offline (hack/cluster/build-images.sh):
// the image assembler (go-containerregistry, no registry, no Docker engine) and a pause binary.
// A nested module so that the main module's vendor tree stays as it is.
module github.com/csi-resizer/csi-resizer/test/images

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
)
