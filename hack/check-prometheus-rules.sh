#!/usr/bin/env bash
# Verify the shipped Prometheus rules for csi-resizer.
#
#   hack/check-prometheus-rules.sh            full check: drift, `promtool check rules`,
#                                             `promtool test rules`, and that the queries of the
#                                             Grafana dashboard parse (installs promtool if missing)
#   hack/check-prometheus-rules.sh --check    drift check only (no promtool needed)
#   hack/check-prometheus-rules.sh --update   regenerate the PrometheusRule from rules.yaml
#
# deploy/prometheus/rules.yaml is the source. deploy/kubernetes/monitoring/prometheusrule.yaml
# is generated from it (a header plus rules.yaml indented under `spec:`), so the two always
# carry the same groups. Plain shell and awk only: no yq, python or Docker needed.
#
# PROMTOOL=/path/to/promtool overrides the promtool binary. When it is missing the script
# installs Debian's `prometheus` package (needs root or sudo, and apt).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RULES=deploy/prometheus/rules.yaml
TESTS=deploy/prometheus/rules_test.yaml
CR=deploy/kubernetes/monitoring/prometheusrule.yaml
DASHBOARD=deploy/grafana/csi-resizer-dashboard.json

cd "$ROOT"

# generate writes the PrometheusRule for $RULES to stdout.
generate() {
	cat <<'EOF'
# GENERATED from deploy/prometheus/rules.yaml by hack/check-prometheus-rules.sh --update.
# Do not edit by hand: edit rules.yaml and regenerate (the check fails on drift).
#
# Prometheus Operator picks this up through the Prometheus object's ruleSelector (and
# ruleNamespaceSelector). The labels below match kube-prometheus' `prometheus: k8s` /
# `role: alert-rules` convention; for kube-prometheus-stack add `release: <helm release>`.
# See docs/metrics.md.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: csi-resizer
  labels:
    app.kubernetes.io/name: csi-resizer
    app.kubernetes.io/component: monitoring
    prometheus: k8s
    role: alert-rules
spec:
EOF
	# Drop the leading comment block of rules.yaml, indent the rest by two spaces
	# (blank lines stay blank so no trailing whitespace appears).
	awk '
		!started && (/^#/ || /^[[:space:]]*$/) { next }
		{ started = 1 }
		/^[[:space:]]*$/ { print ""; next }
		{ print "  " $0 }
	' "$RULES"
}

drift_check() {
	local tmp
	tmp=$(mktemp)
	generate >"$tmp"
	if ! diff -u "$CR" "$tmp" >&2; then
		rm -f "$tmp"
		echo "FAIL: $CR is out of date with $RULES; run hack/check-prometheus-rules.sh --update" >&2
		return 1
	fi
	rm -f "$tmp"
	echo "ok: $CR matches $RULES"
}

# dashboard_exprs_check makes promtool parse every query of the Grafana dashboard, with the
# template variables replaced, by wrapping them in a throw-away rule file.
dashboard_exprs_check() {
	local promtool=$1 tmp n=0
	tmp=$(mktemp)
	echo "groups: [{name: dashboard, rules: [" >"$tmp"
	# The dashboard is pretty-printed JSON, one "expr" per line.
	sed -n 's/^ *"expr": "\(.*\)",\{0,1\}$/\1/p' "$DASHBOARD" |
		sed -e 's/\\"/"/g' -e 's/\\\\/\\/g' \
			-e 's/\$__rate_interval/5m/g' -e 's/\$[a-z_]*/x/g' \
			-e "s/'/''/g" |
		while IFS= read -r expr; do
			n=$((n + 1))
			printf "  {record: 'dashboard:expr:%d', expr: '%s'},\n" "$n" "$expr"
		done >>"$tmp"
	echo "]}]" >>"$tmp"
	if ! grep -q "record: 'dashboard:expr:1'" "$tmp"; then
		echo "FAIL: no queries found in $DASHBOARD" >&2
		rm -f "$tmp"
		return 1
	fi
	if ! "$promtool" check rules "$tmp" >/dev/null; then
		"$promtool" check rules "$tmp" >&2 || true
		echo "FAIL: a query of $DASHBOARD does not parse" >&2
		rm -f "$tmp"
		return 1
	fi
	echo "ok: $(grep -c "record: 'dashboard:expr:" "$tmp") dashboard queries parse"
	rm -f "$tmp"
}

find_promtool() {
	if [[ -n "${PROMTOOL:-}" ]]; then
		echo "$PROMTOOL"
		return
	fi
	if command -v promtool >/dev/null 2>&1; then
		command -v promtool
		return
	fi
	echo "promtool not found; installing Debian package prometheus" >&2
	local sudo=()
	if [[ $(id -u) -ne 0 ]]; then
		command -v sudo >/dev/null 2>&1 || {
			echo "FAIL: promtool missing and not root (set PROMTOOL=...)" >&2
			return 1
		}
		sudo=(sudo)
	fi
	# The package's postinst may fail to start the service where there is no init
	# system; only the promtool binary matters here, so check for it afterwards.
	"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq >&2 || true
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends prometheus >&2 || true
	command -v promtool >/dev/null 2>&1 || {
		echo "FAIL: installing prometheus did not provide promtool" >&2
		return 1
	}
	command -v promtool
}

case "${1:-}" in
--update)
	generate >"$CR"
	echo "wrote $CR"
	exit 0
	;;
--check)
	drift_check
	exit 0
	;;
"") ;;
*)
	echo "usage: $0 [--check|--update]" >&2
	exit 2
	;;
esac

rc=0
drift_check || rc=1

promtool=$(find_promtool)
"$promtool" --version 2>&1 | head -n1
"$promtool" check rules "$RULES" || rc=1
"$promtool" test rules "$TESTS" || rc=1
dashboard_exprs_check "$promtool" || rc=1

if [[ $rc -ne 0 ]]; then
	echo "FAIL: prometheus rules check failed" >&2
else
	echo "ok: prometheus rules pass"
fi
exit $rc
