# syntax=docker/dockerfile:1
# check=error=true

# One image with the three binaries:
#   /csi-resizer          the CSI resizer sidecar (the entrypoint)
#   /statefulset-resizer  the cluster controller (its Deployment sets command)
#   /volume-autoscaler    the volume autoscaler (its Deployment sets command)
#
#   docker buildx build --build-arg VERSION=$(git describe --tags --always) \
#     --platform linux/amd64,linux/arm64 -t <registry>/csi-resizer:<tag> .
#
# Builds offline from vendor/ (-mod=vendor): no module download inside the build. The builder
# runs on the build platform and cross-compiles (CGO_ENABLED=0), so multi-arch builds need no
# emulation. hack/lint-dockerfile.sh checks this file.

# Keep the builder's Go at or above the go directive of go.mod.
#
# GO_VERSION selects the golang builder image.
ARG GO_VERSION=1.26

# builder compiles the three binaries, statically linked.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS builder
ARG TARGETOS
ARG TARGETARCH
# VERSION is reported by --version and in the logs (main.version).
ARG VERSION=dev
WORKDIR /src
COPY . .
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -mod=vendor -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/ ./cmd/csi-resizer ./cmd/statefulset-resizer ./cmd/volume-autoscaler

# The runtime image: no shell, no package manager. It runs as root by default, as upstream's
# external-resizer image does: CSI drivers commonly create their socket as root with mode 0755,
# and `kubectl set image` of the sidecar must keep working. The base's nonroot user (UID/GID
# 65532) is there for the hardened setup, `securityContext.runAsUser: 65532` where the driver's
# socket is writable to it (docs/security.md).
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
LABEL org.opencontainers.image.title="csi-resizer" \
      org.opencontainers.image.description="CSI resizer sidecar with KEP-1790 recovery, statefulset-resizer and volume-autoscaler" \
      org.opencontainers.image.source="https://github.com/csi-resizer/csi-resizer" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=builder /out/csi-resizer /csi-resizer
COPY --from=builder /out/statefulset-resizer /statefulset-resizer
COPY --from=builder /out/volume-autoscaler /volume-autoscaler
USER 0:0
ENTRYPOINT ["/csi-resizer"]
