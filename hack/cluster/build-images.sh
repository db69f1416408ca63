#!/usr/bin/env bash
# Assembles, without a registry or a Docker engine, every container image the one-node cluster
# runs, as docker-archive tarballs that `ctr images import` reads (hack/cluster/up.sh imports
# them). Nothing is pulled: each image is made from files of this machine by
# test/images/cmd/assemble-image.
#
#   registry.k8s.io/pause:3.10.2                     test/images/cmd/pause (containerd 2.4's default sandbox image)
#   localhost/busybox:1.35.0                         Debian's busybox-static, for test pods
#   registry.k8s.io/sig-storage/hostpathplugin:v1.17.1          ../shared/anchors/hostpathplugin + busybox + socat
#   registry.k8s.io/sig-storage/csi-resizer:v2.2.1              ../shared/anchors/external-resizer-v2.2.1 (upstream, released)
#   registry.k8s.io/sig-storage/csi-provisioner:v6.3.0          hack/build-sidecars.sh
#   registry.k8s.io/sig-storage/csi-attacher:v4.12.0            hack/build-sidecars.sh
#   registry.k8s.io/sig-storage/csi-snapshotter:v8.6.0          hack/build-sidecars.sh
#   registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.17.0           ../shared/anchors/node-driver-registrar
#   registry.k8s.io/sig-storage/livenessprobe:v2.19.0                       ../shared/anchors/livenessprobe
#   registry.k8s.io/sig-storage/csi-external-health-monitor-controller:v0.18.0  ../shared/anchors/external-health-monitor-controller
#   csi-resizer:<VERSION>                            this project, as its Dockerfile builds it
#
# The names and tags are those of csi-driver-host-path's kubernetes-1.34 manifests; the script
# fails if the manifests (HOSTPATH_DEPLOY) name other ones. The third-party images are built once
# per set of inputs into ${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer/images-{base,hostpath}-<hash>/out;
# the product image once per source tree state into images-product-<hash>/out.
#
# Usage: hack/cluster/build-images.sh [--product]   prints the tarballs, one per line, on stdout
# (the product's last; its tag is in the file `tag` next to it). --product: only the product's;
# --minimal: pause, busybox and the product's (no csi-driver-host-path, no sidecars).
# Environment: VERSION (default: git describe, as the Makefile), HOSTPATH_PLUGIN, UPSTREAM_RESIZER,
# REGISTRAR, LIVENESSPROBE, HEALTH_MONITOR (the real kubernetes-csi sidecars, built from their own
# source), HOSTPATH_DEPLOY (default: the anchors next to the checkout).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=cache.sh
source "$root/hack/cluster/cache.sh"

anchors="$root/../shared/anchors"
HOSTPATH_PLUGIN=${HOSTPATH_PLUGIN:-$anchors/hostpathplugin}
UPSTREAM_RESIZER=${UPSTREAM_RESIZER:-$anchors/external-resizer-v2.2.1}
REGISTRAR=${REGISTRAR:-$anchors/node-driver-registrar}
LIVENESSPROBE=${LIVENESSPROBE:-$anchors/livenessprobe}
HEALTH_MONITOR=${HEALTH_MONITOR:-$anchors/external-health-monitor-controller}
HOSTPATH_DEPLOY=${HOSTPATH_DEPLOY:-$anchors/csi-driver-host-path-deploy}
VERSION=${VERSION:-$(cd "$root" && git describe --tags --always --dirty 2>/dev/null || echo dev)}

PAUSE_IMAGE=registry.k8s.io/pause:3.10.2
BUSYBOX_IMAGE=localhost/busybox:1.35.0
sig=registry.k8s.io/sig-storage
HOSTPATH_IMAGE=$sig/hostpathplugin:v1.17.1
RESIZER_IMAGE=$sig/csi-resizer:v2.2.1
PROVISIONER_IMAGE=$sig/csi-provisioner:v6.3.0
ATTACHER_IMAGE=$sig/csi-attacher:v4.12.0
SNAPSHOTTER_IMAGE=$sig/csi-snapshotter:v8.6.0
REGISTRAR_IMAGE=$sig/csi-node-driver-registrar:v2.17.0
LIVENESS_IMAGE=$sig/livenessprobe:v2.19.0
HEALTH_MONITOR_IMAGE=$sig/csi-external-health-monitor-controller:v0.18.0

product_only=false minimal=false
case "${1:-}" in
--product) product_only=true ;;
--minimal) minimal=true ;;
"") ;;
*) echo "usage: $0 [--product|--minimal]" >&2; exit 2 ;;
esac
$product_only || $minimal || for f in "$HOSTPATH_PLUGIN" "$UPSTREAM_RESIZER" "$REGISTRAR" "$LIVENESSPROBE" "$HEALTH_MONITOR"; do
  [[ -x "$f" ]] || { echo "build-images: $f missing (set HOSTPATH_PLUGIN, UPSTREAM_RESIZER, REGISTRAR, LIVENESSPROBE, HEALTH_MONITOR)" >&2; exit 1; }
done
for f in /bin/busybox /usr/bin/socat /etc/ssl/certs/ca-certificates.crt; do
  [[ -e "$f" ]] || { echo "build-images: $f missing: run hack/cluster/deps.sh" >&2; exit 1; }
done

# The manifests must name exactly these images, or the pods would wait for a pull that cannot
# happen here.
manifest=$HOSTPATH_DEPLOY/deploy/kubernetes-1.34/hostpath/csi-hostpath-plugin.yaml
if ! $product_only && ! $minimal && [[ -f "$manifest" ]]; then
  want=$(printf '%s\n' "$HOSTPATH_IMAGE" "$RESIZER_IMAGE" "$PROVISIONER_IMAGE" "$ATTACHER_IMAGE" "$SNAPSHOTTER_IMAGE" \
    "$REGISTRAR_IMAGE" "$LIVENESS_IMAGE" "$HEALTH_MONITOR_IMAGE" | sort)
  have=$(sed -n 's/^ *image: *//p' "$manifest" | sort -u)
  if [[ "$want" != "$have" ]]; then
    echo "build-images: $manifest names other images than this script builds:" >&2
    diff <(echo "$want") <(echo "$have") >&2 || true
    exit 1
  fi
fi

export GOWORK=off
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
# The assembler and the binaries of test/images (seconds when Go's build cache is warm).
(cd "$root/test/images" && GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
  go build -trimpath -ldflags "-s -w" -o "$tools/" ./cmd/...)
assemble=$tools/assemble-image

# The base every Go image here starts from, equivalent to gcr.io/distroless/static-debian12:
# users and groups (nonroot = 65532), CA certificates, /tmp, home directories; no shell.
base_files() {
  local dir=$1
  cat >"$dir/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$dir/group" <<'EOF'
root:x:0:
tty:x:5:
staff:x:50:
nobody:x:65534:
nonroot:x:65532:
EOF
  printf 'hosts: files dns\n' >"$dir/nsswitch.conf"
}
# shellcheck disable=SC2054 # the commas are the assembler's option syntax, not separators
# base_layer DIR: sets base_args to that layer's arguments (files of base_files DIR).
base_layer() {
  local dir=$1
  base_args=(--layer "base: distroless-static equivalent (users, CA certificates, /tmp), assembled offline"
    --file "/etc/passwd=$dir/passwd,mode=0644" --file "/etc/group=$dir/group,mode=0644"
    --file "/etc/nsswitch.conf=$dir/nsswitch.conf,mode=0644"
    --file "/etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt,mode=0644"
    --dir /tmp,mode=1777 --dir /root,mode=0700 --dir /home/nonroot,mode=0700,uid=65532,gid=65532)
}
BASE_ENV=(--env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt)

# shellcheck disable=SC2054
# socat_args: socat and the libraries it loads (paths without spaces).
socat_args=(--file /usr/bin/socat=/usr/bin/socat,mode=0755)
for lib in $(ldd /usr/bin/socat | grep -o '/[^ ]*' | sort -u); do
  socat_args+=(--file "$(realpath -s "$lib")=$(realpath "$lib"),mode=0755")
done
# shellcheck disable=SC2054
# busybox_args: busybox and its applets as symlinks, for images with a shell.
busybox_args=(--file /bin/busybox=/bin/busybox,mode=0755)
for a in $(/bin/busybox --list); do
  [[ "$a" == busybox ]] || busybox_args+=(--symlink "/bin/$a=busybox")
done

# The product image: what the Dockerfile's two stages produce, without Docker. The builder
# stage's command, then the runtime stage's base, LABELs, COPYs, USER and ENTRYPOINT.
# test/cluster's TestProductImageMatchesDockerfile checks the two agree.
build_product() {
  local out=$1 b
  b=$(mktemp -d "$out/.base.XXXXXX")
  base_files "$b"
  base_layer "$b"
  (cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -mod=vendor -trimpath \
    -ldflags "-s -w -X main.version=$VERSION" -o "$b/" ./cmd/csi-resizer ./cmd/statefulset-resizer ./cmd/volume-autoscaler)
  "$assemble" --tag "csi-resizer:$VERSION" --out "$out/csi-resizer-product.tar" \
    "${BASE_ENV[@]}" --workdir /home/nonroot --user 0:0 --entrypoint '["/csi-resizer"]' \
    --label org.opencontainers.image.title=csi-resizer \
    --label "org.opencontainers.image.description=CSI resizer sidecar with KEP-1790 recovery, statefulset-resizer and volume-autoscaler" \
    --label org.opencontainers.image.source=https://github.com/csi-resizer/csi-resizer \
    --label "org.opencontainers.image.version=$VERSION" \
    "${base_args[@]}" \
    --layer "COPY --from=builder /out/csi-resizer /csi-resizer" --file "/csi-resizer=$b/csi-resizer,mode=0755" \
    --layer "COPY --from=builder /out/statefulset-resizer /statefulset-resizer" \
    --file "/statefulset-resizer=$b/statefulset-resizer,mode=0755" \
    --layer "COPY --from=builder /out/volume-autoscaler /volume-autoscaler" \
    --file "/volume-autoscaler=$b/volume-autoscaler,mode=0755" >&2
  echo "csi-resizer:$VERSION" >"$out/tag"
  rm -rf "$b"
}
# The source tree's state, cheaply: the commit plus any uncommitted change of what the build reads.
product_hash=$(
  cd "$root"
  {
    echo "$VERSION"
    git rev-parse HEAD 2>/dev/null || true
    git status --porcelain -- cmd pkg internal vendor go.mod go.sum 2>/dev/null || true
    git diff HEAD -- cmd pkg internal vendor go.mod go.sum 2>/dev/null || true
    hash_inputs "${BASH_SOURCE[0]}" "$root/test/images"
  } | sha256sum | cut -c1-16
)
product=$(cached_build images-product "$product_hash" build_product csi-resizer-product.tar tag | tail -1)
# One product image per source state adds up quickly: keep the three used last.
find "$cache_root" -mindepth 3 -maxdepth 3 -path "$cache_root/images-product-*/out/.complete" -printf '%T@ %h\n' |
  sort -rn | tail -n +4 | while read -r _ stale; do
    [[ "$stale" != "$product" ]] && rm -rf "$(dirname "$stale")"
  done

if $product_only; then
  echo "$product/csi-resizer-product.tar"
  exit 0
fi

# Images every cluster has: the sandbox image and a busybox for test pods.
build_base_images() {
  local out=$1 b
  b=$(mktemp -d "$out/.base.XXXXXX")
  base_files "$b"
  {
    "$assemble" --tag "$PAUSE_IMAGE" --out "$out/pause.tar" --user 65535:65535 --entrypoint '["/pause"]' \
      --layer "COPY pause /pause (test/images/cmd/pause)" --file "/pause=$tools/pause,mode=0755"
    "$assemble" --tag "$BUSYBOX_IMAGE" --out "$out/busybox.tar" --cmd '["sh"]' \
      --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --layer "Debian busybox-static $(dpkg-query -W -f='${Version}' busybox-static)" "${busybox_args[@]}" \
      --dir /tmp,mode=1777 --dir /root,mode=0700 \
      --file "/etc/passwd=$b/passwd,mode=0644" --file "/etc/group=$b/group,mode=0644"
  } >&2
  rm -rf "$b"
}
base_images_hash=$(
  {
    hash_inputs "$root/test/images" "${BASH_SOURCE[0]}"
    sha256sum /bin/busybox | cut -c1-64
  } | sha256sum | cut -c1-16
)
base_images=$(cached_build images-base "$base_images_hash" build_base_images pause.tar busybox.tar | tail -1)
if $minimal; then
  ls "$base_images"/*.tar
  echo "$product/csi-resizer-product.tar"
  exit 0
fi

sidecars=$("$root/hack/build-sidecars.sh" | tail -1)

# csi-driver-host-path's images, under the names its kubernetes-1.34 manifests use.
build_hostpath_images() {
  local out=$1 b
  b=$(mktemp -d "$out/.base.XXXXXX")
  base_files "$b"
  base_layer "$b"
  {
    # Upstream's image is Alpine with util-linux, coreutils, socat and tar; busybox gives the
    # mount, umount, losetup and tar the driver runs, socat (with its libraries) the
    # csi-hostpath-socat StatefulSet of the same deployment.
    "$assemble" --tag "$HOSTPATH_IMAGE" --out "$out/hostpathplugin.tar" --entrypoint '["/hostpathplugin"]' \
      --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --layer "busybox-static and socat from Debian" "${busybox_args[@]}" "${socat_args[@]}" \
      --dir /tmp,mode=1777 --file "/etc/passwd=$b/passwd,mode=0644" --file "/etc/group=$b/group,mode=0644" \
      --layer "COPY hostpathplugin /hostpathplugin (the anchor binary)" --file "/hostpathplugin=$HOSTPATH_PLUGIN,mode=0755"
    # kubernetes-csi's sidecar images: distroless static (root, as upstream's), one binary,
    # its entrypoint.
    sidecar() {
      local tag=$1 file=$2 bin=$3 what=$4
      "$assemble" --tag "$tag" --out "$out/$file.tar" "${BASE_ENV[@]}" --entrypoint "[\"/$file\"]" \
        "${base_args[@]}" --layer "COPY $what /$file" --file "/$file=$bin,mode=0755"
    }
    sidecar "$RESIZER_IMAGE" csi-resizer "$UPSTREAM_RESIZER" "upstream external-resizer v2.2.1 (anchor binary)"
    sidecar "$PROVISIONER_IMAGE" csi-provisioner "$sidecars/csi-provisioner" "csi-provisioner (its module, v6.3.0)"
    sidecar "$ATTACHER_IMAGE" csi-attacher "$sidecars/csi-attacher" "csi-attacher (its module, v4.12.0)"
    sidecar "$SNAPSHOTTER_IMAGE" csi-snapshotter "$sidecars/csi-snapshotter" "csi-snapshotter (its module, v8.6.0)"
    sidecar "$REGISTRAR_IMAGE" csi-node-driver-registrar "$REGISTRAR" "node-driver-registrar (anchor binary, built from its source)"
    sidecar "$LIVENESS_IMAGE" livenessprobe "$LIVENESSPROBE" "livenessprobe (anchor binary, built from its source)"
    sidecar "$HEALTH_MONITOR_IMAGE" csi-external-health-monitor-controller "$HEALTH_MONITOR" \
      "external-health-monitor-controller (anchor binary, built from its source)"
  } >&2
  rm -rf "$b"
}
hostpath_hash=$(
  {
    hash_inputs "$root/test/images" "${BASH_SOURCE[0]}"
    echo "$sidecars"
    sha256sum "$HOSTPATH_PLUGIN" "$UPSTREAM_RESIZER" "$REGISTRAR" "$LIVENESSPROBE" "$HEALTH_MONITOR" /bin/busybox /usr/bin/socat /etc/ssl/certs/ca-certificates.crt | cut -c1-64
    ldd /usr/bin/socat | grep -o '/[^ ]*' | sort -u | xargs -r sha256sum | cut -c1-64
  } | sha256sum | cut -c1-16
)
hostpath_images=$(cached_build images-hostpath "$hostpath_hash" build_hostpath_images \
  hostpathplugin.tar csi-resizer.tar csi-provisioner.tar csi-attacher.tar csi-snapshotter.tar \
  csi-node-driver-registrar.tar livenessprobe.tar csi-external-health-monitor-controller.tar | tail -1)

# The product image last: up.sh reads its tag next to it.
ls "$base_images"/*.tar "$hostpath_images"/*.tar
echo "$product/csi-resizer-product.tar"
