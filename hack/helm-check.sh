#!/usr/bin/env bash
# Lints and renders the Helm chart deploy/helm/statefulset-resizer with the helm that
# hack/build-helm.sh builds (pinned, from the Go module proxy; a few minutes cold), and checks the
# renders, without a cluster:
#   - `helm lint --strict` with the default values, with webhook.enabled=false and with
#     admissionPolicies.enabled=false;
#   - `helm template` renders exactly the objects listed below for both;
#   - the Go test deploy/helm (chart_test.go): the RBAC equals the kustomize base's, the
#     Deployments' args are statefulset-resizer flags and name the rendered objects, the webhook
#     runs with its own ServiceAccount, the MutatingWebhookConfiguration is the kustomize one
#     (opt-in; failurePolicy Ignore, Fail for a StatefulSet with a pending change); the
#     ValidatingAdmissionPolicies and their bindings are the kustomize component
#     deploy/kubernetes/statefulset-resizer/policy's, but for naming the release's ServiceAccounts
#     exactly (policy_test.go).
# The server-side dry-run of the renders and the effective RBAC on a real kube-apiserver are
# TestManifestsHelmChart (make manifests-check).
#
# Usage: hack/helm-check.sh [-v]   (-v prints the renders)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
chart="$root/deploy/helm/statefulset-resizer"
verbose=false
[[ "${1:-}" == "-v" ]] && verbose=true

helm=${HELM:-}
if [[ -z "$helm" ]]; then
  helm=$(bash "$root/hack/build-helm.sh" | tail -n1)
fi
echo "helm-check: $helm ($("$helm" version --template '{{.Version}}'))"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

counts() {
  awk '/^kind: /{n[$2]++} END{for (k in n) print k "=" n[k]}' "$1" | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//'
}

# check NAME "Kind=N ..." [--set ...]: lint and render with those values, compare the kinds.
check() {
  local name=$1 want=$2
  shift 2
  if ! "$helm" lint --strict "$chart" --namespace csi-resizer-system "$@" >"$tmp/lint" 2>&1; then
    fail "helm lint --strict $* :"$'\n'"$(cat "$tmp/lint")"
  fi
  if ! "$helm" template statefulset-resizer "$chart" --namespace csi-resizer-system "$@" >"$tmp/out" 2>"$tmp/err"; then
    fail "helm template $*: $(cat "$tmp/err")"
    return
  fi
  $verbose && { echo "--- $name"; cat "$tmp/out"; }
  local got
  got=$(counts "$tmp/out")
  [[ "$got" == "$want" ]] || fail "$name renders [$got], want [$want]"
  echo "helm-check: $name: [$got]"
}

check "default values" "ClusterRole=2 ClusterRoleBinding=2 Deployment=2 MutatingWebhookConfiguration=1 Role=3 RoleBinding=3 Service=2 ServiceAccount=2 ValidatingAdmissionPolicy=3 ValidatingAdmissionPolicyBinding=3"
check "webhook.enabled=false" "ClusterRole=1 ClusterRoleBinding=1 Deployment=1 Role=2 RoleBinding=2 Service=1 ServiceAccount=1 ValidatingAdmissionPolicy=2 ValidatingAdmissionPolicyBinding=2" --set webhook.enabled=false
check "admissionPolicies.enabled=false" "ClusterRole=2 ClusterRoleBinding=2 Deployment=2 MutatingWebhookConfiguration=1 Role=3 RoleBinding=3 Service=2 ServiceAccount=2" --set admissionPolicies.enabled=false

echo "helm-check: go test ./deploy/helm/"
if ! (cd "$root" && HELM="$helm" go test -count=1 ./deploy/helm/); then
  fail "go test ./deploy/helm/"
fi

if ((failures > 0)); then
  echo "helm-check: $failures problem(s)" >&2
  exit 1
fi
echo "helm-check: OK"
