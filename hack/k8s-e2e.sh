#!/usr/bin/env bash
# Runs Kubernetes' own storage e2e tests (e2e.test of v1.36.3, hack/build-k8s-e2e.sh) on the
# one-node cluster (hack/cluster), once with this checkout's csi-resizer and once with upstream's
# external-resizer, and writes the table of docs/k8s-e2e.md. docs/k8s-e2e.md says what runs, how
# and why; in short:
#
#   - CSI Mock volume expansion (csimock/csi_volume_expansion.go): the framework deploys its mock
#     driver from the manifests inside e2e.test; the csi-resizer is whatever containerd has as
#     registry.k8s.io/sig-storage/csi-resizer:v2.1.0, the name those manifests use;
#   - volume-expand, volume-modify, volume-modify-stress and the generic ephemeral volume
#     expansion spec (testsuites/) through the external driver framework
#     (-storage.testdriver=test/k8s-e2e/hostpath/test-driver.yaml) against csi-driver-host-path
#     deployed by hack/cluster/deploy-hostpath.sh, whose resizer is whatever containerd has as
#     registry.k8s.io/sig-storage/csi-resizer:v2.2.1;
#   - the ResourceQuota specs of a PVC's VolumeAttributesClass (apimachinery/resource_quota.go),
#     whose PV is another driver's: no resizer may touch it.
# docs/k8s-e2e.md lists every resize or modify spec of e2e.test and why those left out are.
#
# "ours" is the product image, built by the Dockerfile's recipe (hack/cluster/build-images.sh,
# checked by TestProductImageMatchesDockerfile), the one users deploy; "upstream" is the released
# external-resizer v2.2.1 (the anchor external-resizer-v2.2.1) packaged as kubernetes-csi packages
# its sidecars (a distroless-static equivalent, the binary as entrypoint, root). Each run asserts
# that the driver pod's csi-resizer container runs its image, by image ID. Every image is
# assembled offline and imported under the names the manifests use; nothing is pulled.
#
# The verdict (hack/junit-table -check) fails the run on an e2e.test exit status that is not 0, on a
# spec the focus selects (e2e.test -ginkgo.dry-run, recorded first) that a run did not run and
# test/k8s-e2e/notes.tsv does not explain, on a suite-level failure ([SynchronizedBeforeSuite] and
# the like), on a failed spec, and on an outcome that differs between the images without a
# "differs" note.
#
# Usage: hack/k8s-e2e.sh [--ci|--table]
#   --ci: only the subset CI runs (Expansion with recovery, volume-expand, volume-modify without
#         the [Slow] stress specs), and no docs/ change.
#   --table: no run; the table and docs/k8s-e2e.md again from the last full run's reports.
# Environment:
#   CLUSTER_NAME/CLUSTER_NET/CLUSTER_VETH  the cluster (default csi-resizer-k8s-e2e, 10.213.2,
#                                          crk8se2e0); started here and removed at the end
#   K8S_E2E_REUSE=1       use that cluster if it is running, and leave it running
#   K8S_E2E_RESIZERS      the runs, in order (default "ours upstream"; upstream is left out
#                         when its binary is missing; the first is judged)
#   UPSTREAM_RESIZER      upstream's binary (default the anchor external-resizer-v2.2.1; the
#                         anchor external-resizer is master after v2.2)
#   K8S_E2E_FOCUS_MOCK, K8S_E2E_FOCUS_DRIVER  run these -ginkgo.focus regexps instead of the
#                         suites (mock driver, csi-driver-host-path; "-" or unset: none there)
#   K8S_E2E_OUT           where the logs and JUnit reports go (default bin/k8s-e2e; the dry run's
#                         in expected/, its list of selected specs in expected.txt)
#   K8S_E2E_DOC           the table's document (default docs/k8s-e2e.md; full runs only)
#   UPSTREAM_RESIZER, HOSTPATH_PLUGIN, HOSTPATH_DEPLOY  as for hack/cluster/build-images.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CLUSTER_NAME=${CLUSTER_NAME:-csi-resizer-k8s-e2e}
export CLUSTER_NET=${CLUSTER_NET:-10.213.2}
export CLUSTER_VETH=${CLUSTER_VETH:-crk8se2e0}
# shellcheck source=cluster/lib.sh
source "$root/hack/cluster/lib.sh"
# shellcheck source=cluster/cache.sh
source "$root/hack/cluster/cache.sh"

ci=false table_only=false
case "${1:-}" in
--ci) ci=true ;;
--table) table_only=true ;;
"") ;;
*) echo "usage: $0 [--ci|--table]" >&2; exit 2 ;;
esac
if ! $table_only; then
  # shellcheck source=cluster/require.sh
  source "$root/hack/cluster/require.sh" "k8s-e2e"
fi
UPSTREAM_RESIZER=${UPSTREAM_RESIZER:-$root/../shared/anchors/external-resizer-v2.2.1}
OUT=${K8S_E2E_OUT:-$root/bin/k8s-e2e}
DOC=${K8S_E2E_DOC:-$root/docs/k8s-e2e.md}
resizers=${K8S_E2E_RESIZERS:-ours upstream}
if [[ " $resizers " == *" upstream "* && ! -x "$UPSTREAM_RESIZER" ]]; then
  echo "k8s-e2e: no upstream external-resizer at $UPSTREAM_RESIZER: running ours alone" >&2
  resizers=${resizers//upstream/}
fi
for r in $resizers; do
  [[ "$r" == ours || "$r" == upstream ]] ||
    { echo "k8s-e2e: K8S_E2E_RESIZERS: unknown run $r (ours: the product image; upstream)" >&2; exit 2; }
done

sig=registry.k8s.io/sig-storage
e2eimg=registry.k8s.io/e2e-test-images
# The resizer names of the two deployments (the mock's manifests in e2e.test, and
# csi-driver-host-path's), and where each run's image is kept under a name of its own.
MOCK_RESIZER=$sig/csi-resizer:v2.1.0
HOSTPATH_RESIZER=$sig/csi-resizer:v2.2.1
run_image() { echo "localhost/k8s-e2e/csi-resizer:$1"; }

# The specs of each suite, as e2e.test names them (-ginkgo.focus; the JUnit table lists the same).
driver='External Storage \[Driver: hostpath\.csi\.k8s\.io\]'
focus_recovery='CSI Mock volume expansion Expansion with recovery'
focus_mock='CSI Mock volume expansion'
focus_expand="$driver.*volume-expand"
# volume-modify and volume-modify-stress (the stress specs need test-driver.yaml's
# VolumeModifyStressTestOptions).
focus_modify="$driver.*volume-modify"
# CI's: volume-modify without the [Slow] stress specs.
focus_modify_ci="$driver.*volume-modify \\["
# The generic ephemeral volume patterns only: the spec skips itself for CSI inline volumes, which
# have no PVC to expand.
focus_ephemeral="$driver \\[Testpattern: Generic Ephemeral-volume.*ephemeral should support expansion of pvcs created for ephemeral pvcs"
# A PVC's class changed on the API alone (its PV is of the driver fake.csi.k8s.io, which no
# resizer here serves): each resizer must leave it alone while the quota follows the class.
focus_quota='ResourceQuota \[FeatureGate:VolumeAttributesClass\]'
# Windows patterns (ntfs) cannot run on this Linux node.
skip='\[Feature:Windows\]'
# Two e2e.test processes run side by side, one on the mock driver (with the ResourceQuota specs),
# one on csi-driver-host-path:
# they share nothing but the node, and the specs spend their time waiting for the cluster.
if $ci; then
  focus_mock_group=("$focus_recovery")
  focus_driver_group=("$focus_expand" "$focus_modify_ci")
else
  focus_mock_group=("$focus_mock" "$focus_quota")
  focus_driver_group=("$focus_expand" "$focus_modify" "$focus_ephemeral")
fi
# One spec or suite instead (a -ginkgo.focus regexp each; "-" runs none of that group).
if [[ -n "${K8S_E2E_FOCUS_MOCK:-}${K8S_E2E_FOCUS_DRIVER:-}" ]]; then
  focus_mock_group=() focus_driver_group=()
  [[ "${K8S_E2E_FOCUS_MOCK:--}" == - ]] || focus_mock_group=("$K8S_E2E_FOCUS_MOCK")
  [[ "${K8S_E2E_FOCUS_DRIVER:--}" == - ]] || focus_driver_group=("$K8S_E2E_FOCUS_DRIVER")
fi
focus=("${focus_mock_group[@]}" "${focus_driver_group[@]}")

e2e_bin=$("$root/hack/build-k8s-e2e.sh" | tail -1)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
version=$(cd "$root" && git describe --tags --always --dirty 2>/dev/null || echo dev)

if ! $table_only; then

# --- images ---------------------------------------------------------------------------------
export GOWORK=off
tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
(cd "$root/test/images" && GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 \
  go build -trimpath -ldflags "-s -w" -o "$tools/" ./cmd/assemble-image)
assemble=$tools/assemble-image
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$tools/passwd"
printf 'root:x:0:\nnobody:x:65534:\n' >"$tools/group"

# sidecar_image TAG BINARY WHAT OUT: a resizer image as kubernetes-csi's are (distroless static:
# root, CA certificates, /tmp; the binary as entrypoint).
sidecar_image() {
  "$assemble" --tag "$1" --out "$4" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --entrypoint '["/csi-resizer"]' \
    --layer "base: distroless-static equivalent, assembled offline" \
    --file "/etc/passwd=$tools/passwd,mode=0644" --file "/etc/group=$tools/group,mode=0644" \
    --file "/etc/ssl/certs/ca-certificates.crt=/etc/ssl/certs/ca-certificates.crt,mode=0644" \
    --dir /tmp,mode=1777 --dir /root,mode=0700 \
    --layer "COPY $3 /csi-resizer" --file "/csi-resizer=$2,mode=0755" >&2
}

# agnhost, e2e.test's general-purpose test image, from its Go source (hack/build-k8s-e2e.sh) with
# busybox for the shell commands tests run in it (upstream's is Alpine with a few tools).
build_agnhost() {
  local out=$1 a args=()
  for a in $(/bin/busybox --list); do
    [[ "$a" == busybox ]] || args+=(--symlink "/bin/$a=busybox")
  done
  "$assemble" --tag "$e2eimg/agnhost:2.63.0" --out "$out/agnhost.tar" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --entrypoint '["/agnhost"]' --cmd '["pause"]' \
    --layer "Debian busybox-static" --file /bin/busybox=/bin/busybox,mode=0755 "${args[@]}" \
    --dir /tmp,mode=1777 --file "/etc/passwd=$tools/passwd,mode=0644" --file "/etc/group=$tools/group,mode=0644" \
    --layer "COPY agnhost /agnhost (k8s.io/kubernetes/test/images/agnhost)" --file "/agnhost=$e2e_bin/agnhost,mode=0755"
}
agnhost_hash=$({ echo "$e2e_bin"; sha256sum "$e2e_bin/agnhost" /bin/busybox; hash_inputs "${BASH_SOURCE[0]}" "$root/test/images"; } | sha256sum | cut -c1-16)
agnhost_dir=$(cached_build images-k8s-e2e "$agnhost_hash" build_agnhost agnhost.tar | tail -1)

images=("$agnhost_dir/agnhost.tar")
for r in $resizers; do
  if [[ $r == ours ]]; then
    continue # the product image, imported by up.sh as PRODUCT_IMAGE
  else
    sidecar_image "$(run_image upstream)" "$UPSTREAM_RESIZER" "upstream external-resizer ($UPSTREAM_RESIZER)" "$tools/upstream.tar"
  fi
  images+=("$tools/$r.tar")
done

# --- cluster --------------------------------------------------------------------------------
started=false
cleanup() {
  rm -rf "$tools"
  if $started; then
    bash "$root/hack/cluster/down.sh" || echo "k8s-e2e: $CLUSTER_NAME not removed: CLUSTER_NAME=$CLUSTER_NAME bash hack/cluster/down.sh" >&2
  fi
}
trap cleanup EXIT
if [[ "${K8S_E2E_REUSE:-}" == 1 && -f "$ENV_FILE" ]]; then
  log "k8s-e2e: using the running cluster $CLUSTER_NAME"
else
  bash "$root/hack/cluster/up.sh" >&2
  [[ "${K8S_E2E_REUSE:-}" == 1 ]] || started=true
fi
# shellcheck disable=SC1090
source "$ENV_FILE"
export KUBECONFIG
kubectl() { "$KUBECTL" "$@"; }
ctr() { in_node "$CTR" --address /run/containerd/containerd.sock -n k8s.io "$@" 2> >(grep -v 'support for cgroup v1 is deprecated' >&2); }

log "k8s-e2e: importing ${#images[@]} images"
for img in "${images[@]}"; do
  ctr images import --snapshotter "$SNAPSHOTTER" --local "$img" >/dev/null
done
# Names the framework's manifests use for images the cluster has under other tags: the test
# pods' busybox, and the mock driver's sidecars, one release older than csi-driver-host-path's
# (docs/k8s-e2e.md lists them).
alias_image() { ctr images tag --force "$1" "$2" >/dev/null; }
alias_image localhost/busybox:1.35.0 "$e2eimg/busybox:1.37.0-1"
alias_image localhost/busybox:1.35.0 "$e2eimg/busybox:1.36.1-1"
alias_image "$sig/csi-provisioner:v6.3.0" "$sig/csi-provisioner:v6.1.1"
alias_image "$sig/csi-attacher:v4.12.0" "$sig/csi-attacher:v4.11.0"
alias_image "$sig/csi-snapshotter:v8.6.0" "$sig/csi-snapshotter:v8.5.0"
alias_image "$sig/csi-node-driver-registrar:v2.17.0" "$sig/csi-node-driver-registrar:v2.16.0"

if ! kubectl get statefulset csi-hostpathplugin >/dev/null 2>&1; then
  bash "$root/hack/cluster/deploy-hostpath.sh"
fi
# volume-modify needs a driver that modifies: the flags Kubernetes' own csi-hostpath e2e
# deployment passes, with the parameter of test/k8s-e2e/hostpath/vac.yaml.
if [[ "$(kubectl get statefulset csi-hostpathplugin -o jsonpath='{.spec.template.spec.containers[0].name}')" != hostpath ]]; then
  echo "k8s-e2e: csi-hostpathplugin's first container is not hostpath: the manifests changed" >&2
  exit 1
fi
if ! kubectl get statefulset csi-hostpathplugin -o jsonpath='{.spec.template.spec.containers[0].args}' | grep -q enable-controller-modify-volume; then
  kubectl patch statefulset csi-hostpathplugin --type=json -p '[
    {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--enable-controller-modify-volume=true"},
    {"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--accepted-mutable-parameter-names=e2eVacTest"}]' >/dev/null
fi

driver_dir=$(mktemp -d "$tools/driver.XXXXXX")
sed "s|@DIR@|$root/test/k8s-e2e/hostpath|" "$root/test/k8s-e2e/hostpath/test-driver.yaml" >"$driver_dir/test-driver.yaml"

# image_id NAME: the image ID containerd has under NAME (its config's digest), as the kubelet
# reports a container's imageID.
image_id() {
  local manifest
  manifest=$(ctr images ls "name==$1" 2>/dev/null | awk 'NR == 2 { print $3 }')
  [[ -n "$manifest" ]] || return 1
  ctr content get "$manifest" 2>/dev/null | grep -o '"config":{[^}]*}' | grep -o 'sha256:[0-9a-f]*'
}

# run_e2e RUN GROUP FOCUS...: one e2e.test process, its log, JUnit report and exit status in
# $OUT/RUN/GROUP. RUN "expected" is the dry run (-ginkgo.dry-run, the same focus and skip): its
# report lists the specs the focus selects, which the verdict wants run.
run_e2e() {
  local r=$1 group=$2 f rc=0
  shift 2
  mkdir -p "$OUT/$r/$group"
  local args=(-kubeconfig "$KUBECONFIG" -kubectl-path "$KUBECTL" -provider skeleton -repo-root "$driver_dir"
    -storage.testdriver "$driver_dir/test-driver.yaml" -report-dir "$OUT/$r/$group"
    -ginkgo.skip "$skip" -ginkgo.no-color -ginkgo.v -ginkgo.timeout 3h)
  [[ $r != expected ]] || args+=(-ginkgo.dry-run)
  for f in "$@"; do
    args+=(-ginkgo.focus "$f")
  done
  "$e2e_bin/e2e.test" "${args[@]}" >"$OUT/$r/$group/e2e.log" 2>&1 || rc=$?
  echo "$rc" >"$OUT/$r/$group/rc"
  return "$rc"
}

# groups: the e2e.test processes of a run (the mock driver's, csi-driver-host-path's).
groups=()
((${#focus_mock_group[@]} == 0)) || groups+=(mock)
((${#focus_driver_group[@]} == 0)) || groups+=(hostpath)

# --- runs -----------------------------------------------------------------------------------
# What ran, for --table.
$ci && echo ci >"$OUT/mode" || echo full >"$OUT/mode"
printf '%s\n' "$resizers" >"$OUT/resizers"
printf '%s\n' "${focus[@]}" >"$OUT/focus"
echo "$(cd "$root" && git rev-parse --short HEAD) $version" >"$OUT/commit"
printf '%s\n' "${groups[@]}" >"$OUT/groups"
# The specs the focus selects, from e2e.test's dry run: the verdict fails a run that ran fewer.
rm -rf "${OUT:?}/expected"
for group in "${groups[@]}"; do
  case $group in
  mock) run_e2e expected mock "${focus_mock_group[@]}" ;;
  hostpath) run_e2e expected hostpath "${focus_driver_group[@]}" ;;
  esac || { echo "k8s-e2e: the dry run of the $group specs failed: see $OUT/expected/$group/e2e.log" >&2; exit 1; }
done
cat "$OUT"/expected/*/junit_01.xml | sed -n 's/.*<testcase name="\[It\] \(.*\)" classname="[^"]*" status="passed".*/\1/p' |
  sed "s/&#39;/'/g; s/&#34;/\"/g; s/&lt;/</g; s/&gt;/>/g; s/&amp;/\&/g" | sort -u >"$OUT/expected.txt"
log "k8s-e2e: the focus selects $(wc -l <"$OUT/expected.txt") specs ($OUT/expected.txt)"
for r in $resizers; do
  log "k8s-e2e: run '$r'"
  # containerd keeps a name without a registry (csi-resizer:<tag>) as docker.io/library/<name>.
  [[ $r != ours ]] || alias_image "$(
    [[ $PRODUCT_IMAGE == */* ]] || printf docker.io/library/
    echo "$PRODUCT_IMAGE"
  )" "$(run_image ours)"
  alias_image "$(run_image "$r")" "$MOCK_RESIZER"
  alias_image "$(run_image "$r")" "$HOSTPATH_RESIZER"
  # The driver's pod restarts to run the image now under the manifests' name.
  old=$(kubectl get pod csi-hostpathplugin-0 -o jsonpath='{.metadata.uid}')
  kubectl delete pod csi-hostpathplugin-0 --wait=true >/dev/null
  for _ in $(seq 60); do
    uid=$(kubectl get pod csi-hostpathplugin-0 -o jsonpath='{.metadata.uid}' 2>/dev/null || true)
    [[ -z "$uid" || "$uid" == "$old" ]] || break
    sleep 1
  done
  if ! kubectl wait --for=condition=Ready pod/csi-hostpathplugin-0 --timeout=180s >/dev/null 2>&1; then
    echo "k8s-e2e: csi-hostpathplugin-0 not Ready with $(run_image "$r")" >&2
    exit 1
  fi
  running=$(kubectl get pod csi-hostpathplugin-0 -o jsonpath='{.status.containerStatuses[?(@.name=="csi-resizer")].imageID}')
  want=$(image_id "$(run_image "$r")")
  if [[ "$running" != "$want" ]]; then
    echo "k8s-e2e: csi-hostpathplugin's csi-resizer runs $running, not $(run_image "$r") ($want)" >&2
    exit 1
  fi
  log "k8s-e2e: csi-hostpathplugin's csi-resizer runs $(run_image "$r") ($want)"

  rm -rf "${OUT:?}/$r"
  start=$(date +%s)
  pids=()
  if ((${#focus_mock_group[@]})); then
    run_e2e "$r" mock "${focus_mock_group[@]}" &
    pids+=($!)
  fi
  if ((${#focus_driver_group[@]})); then
    run_e2e "$r" hostpath "${focus_driver_group[@]}" &
    pids+=($!)
  fi
  # The run's exit status: the first of its processes' that is not 0 (each is in GROUP/rc).
  rc=0
  for pid in "${pids[@]}"; do
    wait "$pid" || { ((rc != 0)) || rc=$?; }
  done
  echo "$(($(date +%s) - start))" >"$OUT/$r/seconds"
  echo "$rc" >"$OUT/$r/rc"
  log "k8s-e2e: run '$r': e2e.test exit $rc in $(cat "$OUT/$r/seconds")s; logs $OUT/$r/{mock,hostpath}/e2e.log"
done

fi # ! $table_only

mode=full
if $table_only; then
  [[ -f "$OUT/focus" ]] || { echo "k8s-e2e: no run in $OUT to make a table of" >&2; exit 1; }
  mapfile -t focus <"$OUT/focus"
  mapfile -t groups <"$OUT/groups"
  resizers=$(cat "$OUT/resizers")
  mode=$(cat "$OUT/mode")
fi

# --- the table ------------------------------------------------------------------------------
table_args=(-notes "$root/test/k8s-e2e/notes.tsv" -exclude "$skip")
for f in "${focus[@]}"; do
  table_args+=(-match "$f")
done
# The verdict's evidence: the dry run's reports (what the focus selects), each run's reports
# and e2e.test's exit status.
expect=() reports=()
for group in "${groups[@]}"; do
  expect+=("$OUT/expected/$group/junit_01.xml")
done
table_args+=(-expect "$(IFS=,; echo "${expect[*]}")")
for r in $resizers; do
  files=()
  for group in "${groups[@]}"; do
    [[ -f "$OUT/$r/$group/junit_01.xml" ]] ||
      { echo "k8s-e2e: run '$r' wrote no JUnit report: see $OUT/$r/$group/e2e.log" >&2; exit 1; }
    files+=("$OUT/$r/$group/junit_01.xml")
  done
  reports+=("$r=$(IFS=,; echo "${files[*]}")")
  table_args+=(-exit "$r=$(cat "$OUT/$r/rc")")
done
# -check: the verdict (hack/junit-table's doc): it fails on an e2e.test exit status that is not
# 0, on a selected spec not run that test/k8s-e2e/notes.tsv does not explain, on a suite-level
# failure, on a failed spec, and on an outcome that differs between the images without a note.
verdict=0
table=$(cd "$root" && go run -mod=vendor ./hack/junit-table -check "${table_args[@]}" "${reports[@]}") || verdict=$?
echo "$table"

# A full run rewrites the generated part of the document; the part above the marker is prose.
marker='<!-- Everything below is written by hack/k8s-e2e.sh (make test-k8s-e2e): do not edit. -->'
if $table_only || ! $ci; then
  {
    awk -v m="$marker" '{ print } $0 == m { exit }' "$DOC"
    echo
    read -r commit run_version 2>/dev/null <"$OUT/commit" ||
      { commit=$(cd "$root" && git rev-parse --short HEAD); run_version=$version; }
    echo "Run started $(date -u -r "$OUT/mode" '+%Y-%m-%d %H:%M UTC') on commit $commit ($run_version), e2e.test $("$e2e_bin/e2e.test" -version 2>/dev/null | head -1)."
    echo "e2e.test's dry run with the same focus and skip selects $(wc -l <"$OUT/expected.txt") specs: the verdict wants each run, or explained in test/k8s-e2e/notes.tsv."
    if [[ $mode == ci ]]; then
      echo
      # shellcheck disable=SC2016 # the backquotes are Markdown
      echo "This table is of the CI subset (\`hack/k8s-e2e.sh --ci\`, then \`--table\`): $(printf '`%s`, ' "${focus[@]}" | sed 's/, $//')."
    fi
    echo
    echo "| run | resizer image | e2e.test exit | duration |"
    echo "|---|---|---|---|"
    for r in $resizers; do
      case $r in
      ours) what="the product image csi-resizer:$run_version, as the Dockerfile's recipe builds it" ;;
      upstream) what="upstream external-resizer (the anchor $(basename "$UPSTREAM_RESIZER")), packaged as kubernetes-csi packages its sidecars" ;;
      esac
      s=$(cat "$OUT/$r/seconds")
      echo "| $r | $what | $(cat "$OUT/$r/rc") | $((s / 60)) min $((s % 60)) s |"
    done
    echo
    echo "$table"
  } >"$DOC.tmp"
  grep -qxF "$marker" "$DOC.tmp" || { rm -f "$DOC.tmp"; echo "k8s-e2e: $DOC has no line '$marker'" >&2; exit 1; }
  mv "$DOC.tmp" "$DOC"
  log "k8s-e2e: wrote $DOC"
fi
if ((verdict != 0)); then
  echo "k8s-e2e: FAIL: the verdict above (the table above; logs under $OUT)" >&2
  exit 1
fi
log "k8s-e2e: PASS: every run exited 0, ran every spec the focus selects that notes.tsv does not explain, with no suite-level failure, no failed spec and no unexplained difference between the images"
