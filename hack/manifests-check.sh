#!/usr/bin/env bash
# Renders every kustomization under deploy/kubernetes with `kubectl kustomize` and checks what
# comes out, without a cluster:
#   - every Kustomization renders, every Component renders inside an empty wrapper;
#   - every YAML file in deploy/kubernetes is used by the kustomization of its directory
#     (no forgotten file);
#   - the bases and overlays render exactly the objects listed below, and the namespace-agnostic
#     bases render without a hard-coded namespace;
#   - the bases fill in the namespace of their ServiceAccount subjects when used with
#     `namespace:` (rendered through a wrapper, with the optional components).
# The server-side dry-run of the same renders against a real kube-apiserver is
# test/integration/manifests_test.go (make test-integration).
#
# kubectl: $KUBECTL if set, else the one hack/build-k8s-bins.sh has already built (the
# integration binaries), else kubectl on PATH, else `kustomize` on PATH, else
# hack/build-k8s-bins.sh builds it (~10 min cold).
#
# Usage: hack/manifests-check.sh [-v]   (-v prints every render)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deploy="$root/deploy/kubernetes"
verbose=false
[[ "${1:-}" == "-v" ]] && verbose=true

render_cmd=()
if [[ -n "${KUBECTL:-}" ]]; then
  render_cmd=("$KUBECTL" kustomize)
elif [[ -x "$root/hack/build-k8s-bins.sh" ]] && bin=$("$root/hack/build-k8s-bins.sh" --print-dir 2>/dev/null) && [[ -x "$bin/kubectl" ]]; then
  render_cmd=("$bin/kubectl" kustomize)
elif command -v kubectl >/dev/null 2>&1; then
  render_cmd=(kubectl kustomize)
elif command -v kustomize >/dev/null 2>&1; then
  render_cmd=(kustomize build)
elif [[ -x "$root/hack/build-k8s-bins.sh" ]] && bin=$("$root/hack/build-k8s-bins.sh" | tail -n1) && [[ -x "$bin/kubectl" ]]; then
  render_cmd=("$bin/kubectl" kustomize)
else
  echo "manifests-check: no kubectl or kustomize, and hack/build-k8s-bins.sh could not build one; set KUBECTL" >&2
  exit 1
fi
echo "manifests-check: rendering with: ${render_cmd[*]} ($("${render_cmd[0]}" version --client 2>/dev/null | tr '\n' ' ' || true))"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# render DIR OUT: kubectl kustomize DIR > OUT.
render() {
  if ! "${render_cmd[@]}" "$1" >"$2" 2>"$2.err"; then
    fail "render ${1#"$root"/}: $(cat "$2.err")"
    return 1
  fi
  $verbose && { echo "--- ${1#"$root"/}"; cat "$2"; }
  return 0
}

# counts FILE: "Kind=N ..." for the top-level objects of a render, sorted by kind.
counts() {
  awk '/^kind: /{n[$2]++} END{for (k in n) print k "=" n[k]}' "$1" | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//'
}

# wrapper DIR TEXT: a kustomization in a fresh temp dir whose body is TEXT, where @REL@ is
# DIR relative to the wrapper (kustomize only accepts relative paths).
wrapper() {
  local w
  w=$(mktemp -d "$tmp/wrap.XXXX")
  local rel
  rel=$(realpath --relative-to="$w" "$1")
  printf '%s\n' "${2//@REL@/$rel}" >"$w/kustomization.yaml"
  echo "$w"
}

# 1. Every kustomization renders.
n=0
while IFS= read -r k; do
  dir=$(dirname "$k")
  rel=${dir#"$root"/}
  out="$tmp/out.$n"; n=$((n + 1))
  if grep -q '^kind: Component' "$k"; then
    w=$(wrapper "$dir" $'components:\n- @REL@')
    render "$w" "$out" && echo "manifests-check: $rel (Component, alone): $(grep -c '^kind: ' "$out" || true) objects [$(counts "$out")]"
  else
    render "$dir" "$out" && echo "manifests-check: $rel: $(grep -c '^kind: ' "$out" || true) objects [$(counts "$out")]"
  fi
done < <(find "$deploy" -name kustomization.yaml | LC_ALL=C sort)

# 2. No orphan YAML: each file is named by the kustomization.yaml of its own directory.
while IFS= read -r f; do
  k="$(dirname "$f")/kustomization.yaml"
  b=$(basename "$f")
  if [[ ! -f "$k" ]]; then
    fail "${f#"$root"/}: no kustomization.yaml in its directory"
  elif ! grep -Eq "^[[:space:]]*-?[[:space:]]*(path:[[:space:]]*)?${b//./\\.}[[:space:]]*$" "$k"; then
    fail "${f#"$root"/}: not used by ${k#"$root"/}"
  fi
done < <(find "$deploy" -name '*.yaml' ! -name kustomization.yaml | LC_ALL=C sort)

# 3. Exact content of the shipped renders. Update together with the manifests.
expect() { # DIR "Kind=N ..." [namespace-agnostic]
  local out="$tmp/expect.$RANDOM"
  render "$deploy/$1" "$out" || return 0
  local got
  got=$(counts "$out")
  [[ "$got" == "$2" ]] || fail "$1 renders [$got], want [$2]"
  if [[ "${3:-}" == namespace-agnostic ]] && grep -Eq '^  namespace:|^    namespace:' "$out"; then
    fail "$1 must not hard-code a namespace (the user's kustomization sets it)"
  fi
}
expect rbac "ClusterRole=1 ClusterRoleBinding=1 Role=1 RoleBinding=1 ServiceAccount=1" namespace-agnostic
expect statefulset-resizer "ClusterRole=1 ClusterRoleBinding=1 Deployment=1 Role=2 RoleBinding=2 Service=1 ServiceAccount=1" namespace-agnostic
expect volume-autoscaler "ClusterRole=1 ClusterRoleBinding=1 Deployment=1 Role=1 RoleBinding=1 Service=1 ServiceAccount=1" namespace-agnostic
expect monitoring "PrometheusRule=1 ServiceMonitor=3" namespace-agnostic
expect monitoring/csi-resizer-service "Service=1" namespace-agnostic
expect sidecar/examples/csi-hostpath "ClusterRole=1 ClusterRoleBinding=1 Role=1 RoleBinding=1 Service=1 ServiceAccount=1 StatefulSet=1"
expect node-deployment "ClusterRole=2 ClusterRoleBinding=2 DaemonSet=1 ServiceAccount=1" namespace-agnostic

# 4. With a namespace, every ServiceAccount subject of a binding gets it.
check_subjects() { # NAME OUT NAMESPACE
  local bad
  bad=$(awk -v ns="$3" '
    /^kind: /{kind=$2}
    /^subjects:/{insub=1; next}
    /^[^ -]/{insub=0}
    insub && /^- kind: ServiceAccount/{pending=1; has=""; next}
    insub && pending && /^  namespace: /{has=$2}
    insub && pending && (/^- / || /^---/){ if (has != ns) print kind; pending=0 }
    /^---/{ if (pending && has != ns) print kind; pending=0; insub=0 }
    END{ if (pending && has != ns) print kind }' "$2" | tr "\n" " ")
  [[ -z "$bad" ]] || fail "$1: ServiceAccount subjects without namespace $3 in: $bad"
}
w=$(wrapper "$deploy" $'namespace: manifests-check\nresources:\n- @REL@/rbac\ncomponents:\n- @REL@/rbac/controller-expand-secrets')
if render "$w" "$tmp/ns-rbac"; then
  check_subjects "rbac + controller-expand-secrets" "$tmp/ns-rbac" manifests-check
  got=$(counts "$tmp/ns-rbac")
  [[ "$got" == "ClusterRole=2 ClusterRoleBinding=2 Role=1 RoleBinding=1 ServiceAccount=1" ]] ||
    fail "rbac + controller-expand-secrets renders [$got]"
fi
# The node-deployment example: its bindings get the namespace, no Lease rights, and the
# DaemonSet's csi-resizer runs --node-deployment with NODE_NAME from the downward API.
w=$(wrapper "$deploy" $'namespace: manifests-check\nresources:\n- @REL@/node-deployment')
if render "$w" "$tmp/ns-node"; then
  check_subjects node-deployment "$tmp/ns-node" manifests-check
  grep -q -- '- --node-deployment' "$tmp/ns-node" || fail "node-deployment: --node-deployment not on csi-resizer"
  grep -q -- '--leader-election' "$tmp/ns-node" && fail "node-deployment: --leader-election cannot be combined with --node-deployment"
  grep -q 'fieldPath: spec.nodeName' "$tmp/ns-node" || fail "node-deployment: NODE_NAME not from the downward API"
fi
w=$(wrapper "$deploy" $'namespace: manifests-check\nresources:\n- @REL@/statefulset-resizer')
render "$w" "$tmp/ns-sts" && check_subjects statefulset-resizer "$tmp/ns-sts" manifests-check
# volume-autoscaler: its bindings get the namespace; the kubelet's stats, never the node proxy.
w=$(wrapper "$deploy" $'namespace: manifests-check\nresources:\n- @REL@/volume-autoscaler')
if render "$w" "$tmp/ns-va"; then
  check_subjects volume-autoscaler "$tmp/ns-va" manifests-check
  grep -q 'nodes/proxy' "$tmp/ns-va" && fail "volume-autoscaler: nodes/proxy must not be granted"
fi
# The webhook component: its own Deployment and ServiceAccount, its configuration calls the
# Service in the user's namespace, its bindings get the namespace, and the controller's Deployment
# does not serve the webhook.
w=$(wrapper "$deploy" $'namespace: manifests-check\nresources:\n- @REL@/statefulset-resizer\ncomponents:\n- @REL@/statefulset-resizer/webhook')
if render "$w" "$tmp/ns-sts-webhook"; then
  got=$(counts "$tmp/ns-sts-webhook")
  [[ "$got" == "ClusterRole=2 ClusterRoleBinding=2 Deployment=2 MutatingWebhookConfiguration=1 Role=3 RoleBinding=3 Service=2 ServiceAccount=2" ]] ||
    fail "statefulset-resizer + webhook renders [$got]"
  check_subjects "statefulset-resizer + webhook" "$tmp/ns-sts-webhook" manifests-check
  [[ $(grep -c '^      namespace: manifests-check$' "$tmp/ns-sts-webhook") == 4 ]] ||
    fail "statefulset-resizer + webhook: the webhooks' clientConfig.service.namespace is not the kustomization's namespace"
  [[ $(grep -c -- '- --webhook-port=9443' "$tmp/ns-sts-webhook") == 1 ]] || fail "statefulset-resizer + webhook: want --webhook-port=9443 once (the webhook's Deployment)"
  grep -q -- '^        - webhook$' "$tmp/ns-sts-webhook" || fail "statefulset-resizer + webhook: the webhook's Deployment does not run the webhook subcommand"
  grep -q 'serviceAccountName: statefulset-resizer-webhook$' "$tmp/ns-sts-webhook" || fail "statefulset-resizer + webhook: the webhook's Deployment does not run as statefulset-resizer-webhook"
fi
# The policy component: three cluster-scoped policies, each with its binding and the Deny action.
# (kustomize's built-in schema predates ValidatingAdmissionPolicy, so the namespace transformer
# gives these cluster-scoped objects a metadata.namespace; kubectl and the apiserver drop it.)
w=$(wrapper "$deploy" $'namespace: manifests-check\nresources:\n- @REL@/statefulset-resizer\ncomponents:\n- @REL@/statefulset-resizer/webhook\n- @REL@/statefulset-resizer/policy')
if render "$w" "$tmp/ns-sts-policy"; then
  got=$(counts "$tmp/ns-sts-policy")
  [[ "$got" == "ClusterRole=2 ClusterRoleBinding=2 Deployment=2 MutatingWebhookConfiguration=1 Role=3 RoleBinding=3 Service=2 ServiceAccount=2 ValidatingAdmissionPolicy=3 ValidatingAdmissionPolicyBinding=3" ]] ||
    fail "statefulset-resizer + webhook + policy renders [$got]"
  [[ $(grep -A2 '^  validationActions:$' "$tmp/ns-sts-policy" | grep -c '^  - Deny$') == 3 &&
     $(grep -A2 '^  validationActions:$' "$tmp/ns-sts-policy" | grep -c '^  - ') == 3 ]] ||
    fail "statefulset-resizer + policy: want validationActions [Deny] on each of the 3 bindings"
  for p in controller recreate-guard webhook; do
    grep -q "^  policyName: statefulset-resizer-$p$" "$tmp/ns-sts-policy" ||
      fail "statefulset-resizer + policy: no binding of the policy statefulset-resizer-$p"
  done
fi
render "$deploy/sidecar/examples/csi-hostpath" "$tmp/hostpath" && check_subjects "sidecar/examples/csi-hostpath" "$tmp/hostpath" default

# 5. The sidecar patch reached the hostpath StatefulSet, in place of upstream's resizer.
if [[ -s "$tmp/hostpath" ]]; then
  grep -q 'image: registry.example/csi-resizer:' "$tmp/hostpath" || fail "csi-hostpath: csi-resizer image not patched in"
  grep -q 'csi-resizer:v1' "$tmp/hostpath" && fail "csi-hostpath: upstream external-resizer image still present"
  [[ $(grep -c 'image: registry.example/csi-resizer:' "$tmp/hostpath") == 1 ]] || fail "csi-hostpath: want exactly one csi-resizer container"
  grep -q -- '--csi-address=$(ADDRESS)' "$tmp/hostpath" || fail "csi-hostpath: --csi-address=\$(ADDRESS) missing"
  grep -q 'path: /healthz/leader-election' "$tmp/hostpath" || fail "csi-hostpath: liveness probe missing"
fi

if ((failures > 0)); then
  echo "manifests-check: $failures problem(s)" >&2
  exit 1
fi
echo "manifests-check: OK"
