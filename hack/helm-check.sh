#!/usr/bin/env bash
# Lints and renders the Helm charts deploy/helm/statefulset-resizer and deploy/helm/volume-autoscaler
# with the helm that hack/build-helm.sh builds (pinned, from the Go module proxy; a few minutes
# cold), and checks the renders, without a cluster:
#   - `helm lint --strict` of statefulset-resizer with the default values, with
#     webhook.enabled=false and with admissionPolicies.enabled=false; of volume-autoscaler with the
#     default values, with leaderElection.enabled=false and with kubelet.insecureSkipTLSVerify=true;
#   - `helm template` renders exactly the objects listed below for both;
#   - the Go test deploy/helm (chart_test.go): the RBAC equals the kustomize base's, the
#     Deployments' args are statefulset-resizer flags and name the rendered objects, the webhook
#     runs with its own ServiceAccount, the MutatingWebhookConfiguration is the kustomize one
#     (opt-in; failurePolicy Ignore, Fail for a StatefulSet with a pending change); the
#     ValidatingAdmissionPolicies and their bindings are the kustomize component
#     deploy/kubernetes/statefulset-resizer/policy's, but for naming the release's ServiceAccounts
#     exactly (policy_test.go); volume-autoscaler's RBAC equals its kustomize base's and never
#     grants nodes/proxy, its objects are the base's, its args pass the command's own validation
#     (autoscaler_test.go).
# The server-side dry-run of the renders and the effective RBAC on a real kube-apiserver are
# TestManifestsHelmChart and TestManifestsHelmChartVolumeAutoscaler (make manifests-check).
#
# Usage: hack/helm-check.sh [-v]   (-v prints the renders)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
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

# check CHART NAME "Kind=N ..." [--set ...]: lint deploy/helm/CHART and render it as release CHART
# (the kustomize base's names) with those values, compare the kinds.
check() {
  local chart_name=$1 name=$2 want=$3
  local chart="$root/deploy/helm/$chart_name"
  shift 3
  if ! "$helm" lint --strict "$chart" --namespace csi-resizer-system "$@" >"$tmp/lint" 2>&1; then
    fail "$chart_name: helm lint --strict $* :"$'\n'"$(cat "$tmp/lint")"
  fi
  if ! "$helm" template "$chart_name" "$chart" --namespace csi-resizer-system "$@" >"$tmp/out" 2>"$tmp/err"; then
    fail "$chart_name: helm template $*: $(cat "$tmp/err")"
    return
  fi
  $verbose && { echo "--- $chart_name: $name"; cat "$tmp/out"; }
  local got
  got=$(counts "$tmp/out")
  [[ "$got" == "$want" ]] || fail "$chart_name: $name renders [$got], want [$want]"
  echo "helm-check: $chart_name: $name: [$got]"
}

check statefulset-resizer "default values" "ClusterRole=2 ClusterRoleBinding=2 Deployment=2 MutatingWebhookConfiguration=1 Role=3 RoleBinding=3 Service=2 ServiceAccount=2 ValidatingAdmissionPolicy=3 ValidatingAdmissionPolicyBinding=3"
check statefulset-resizer "webhook.enabled=false" "ClusterRole=1 ClusterRoleBinding=1 Deployment=1 Role=2 RoleBinding=2 Service=1 ServiceAccount=1 ValidatingAdmissionPolicy=2 ValidatingAdmissionPolicyBinding=2" --set webhook.enabled=false
check statefulset-resizer "admissionPolicies.enabled=false" "ClusterRole=2 ClusterRoleBinding=2 Deployment=2 MutatingWebhookConfiguration=1 Role=3 RoleBinding=3 Service=2 ServiceAccount=2" --set admissionPolicies.enabled=false
check volume-autoscaler "default values" "ClusterRole=1 ClusterRoleBinding=1 Deployment=1 Role=1 RoleBinding=1 Service=1 ServiceAccount=1"
check volume-autoscaler "leaderElection.enabled=false" "ClusterRole=1 ClusterRoleBinding=1 Deployment=1 Service=1 ServiceAccount=1" --set leaderElection.enabled=false
check volume-autoscaler "kubelet.insecureSkipTLSVerify=true" "ClusterRole=1 ClusterRoleBinding=1 Deployment=1 Role=1 RoleBinding=1 Service=1 ServiceAccount=1" --set kubelet.insecureSkipTLSVerify=true
# Never the node proxy, whatever the values (the Go test compares the rules with the base's).
for set in "" "--set kubelet.insecureSkipTLSVerify=true" "--set leaderElection.enabled=false"; do
  # shellcheck disable=SC2086 # $set is one --set or nothing
  if "$helm" template volume-autoscaler "$root/deploy/helm/volume-autoscaler" --namespace csi-resizer-system $set | grep -q 'nodes/proxy"'; then
    fail "volume-autoscaler $set: nodes/proxy granted"
  fi
done

echo "helm-check: go test ./deploy/helm/"
if ! (cd "$root" && HELM="$helm" go test -count=1 ./deploy/helm/); then
  fail "go test ./deploy/helm/"
fi

if ((failures > 0)); then
  echo "helm-check: $failures problem(s)" >&2
  exit 1
fi
echo "helm-check: OK"
