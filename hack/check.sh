#!/usr/bin/env bash
# make check: every stage CI runs, in two lanes side by side, so that the machine's cores work
# while the cluster suites wait for pods and the integration tests wait for their apiservers.
#
#   1. verify-mod (make verify's `go mod tidy && go mod vendor`, no diff), alone: it rewrites
#      vendor/ in place, which no compile of the main module may read meanwhile.
#   2. two lanes at once:
#        cluster: test-cluster, then test-k8s-e2e-ci (root, namespaces, one node at a time;
#                 each skips in one line where a node cannot run, except under CI=true)
#        main:    verify-code (the rest of make verify: gofmt, go vet, govulncheck), helm-check,
#                 test, test-fuzz, check-rules, lint-dockerfile, manifests-check,
#                 test-integration (without TestManifests*, which manifests-check just ran)
#      and then soak-ci and bench-smoke, each taken by whichever lane is free first (warm, that
#      is the cluster lane; cold, the main lane, while the cluster's parts still build).
#
# Why these are safe side by side: the control planes of test/framework take free ports with a
# retry and keep etcd's data under the test's own temporary directory; the one-node clusters run
# their control plane inside their own network namespace; the caches (the Kubernetes binaries,
# helm, the cluster's parts) build under a lock and publish with an atomic rename; Go's build
# and module caches are safe for concurrent go commands; apt-get waits for the dpkg lock.
#
# Each stage's output goes to $CHECK_LOGS/STAGE.log (default bin/check) and is printed when the
# stage ends, as one block whose lines start with the lane's name ("[cluster] ", "[main]    "):
# whole, or for a passing stage longer than CHECK_PRINT_LINES (default 3000) lines its tail and
# the log's path. At the end: every go test summary line of every stage (ok/FAIL, verbatim),
# the stages with their times, and the verdict. The first failing stage fails make check with
# its name and log; the other lane is stopped (its stage's process group gets SIGTERM, then
# SIGKILL) and, when that was a cluster stage, its node removed with hack/cluster/down.sh.
#
# CHECK_SERIAL=1 runs every stage in one lane, one after another.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
MAKE=${MAKE:-make}
LOGS=${CHECK_LOGS:-$root/bin/check}
PRINT_LINES=${CHECK_PRINT_LINES:-3000}

first=(verify-mod)
lane_cluster=(test-cluster test-k8s-e2e-ci)
lane_main=(verify-code helm-check test test-fuzz check-rules lint-dockerfile manifests-check test-integration)
pool=(soak-ci bench-smoke)
# What a stage runs besides its target's defaults (make variables).
declare -A stage_vars=(
  # manifests-check ran exactly these (same package, tags and flags).
  [test-integration]="INTEGRATION_SKIP=^TestManifests"
)
# The clusters the cluster lane's stages start (their scripts' defaults, or the caller's
# CLUSTER_*): removed after a stop and at the end, where a stage could not remove its own.
cluster_names=(
  "${CLUSTER_NAME:-csi-resizer-test} ${CLUSTER_NET:-10.213.1} ${CLUSTER_VETH:-crtest0}"
  "${CLUSTER_NAME:-csi-resizer-k8s-e2e} ${CLUSTER_NET:-10.213.2} ${CLUSTER_VETH:-crk8se2e0}"
)
if [[ "${CHECK_SERIAL:-}" == 1 ]]; then
  lane_main=("${lane_main[@]}" "${lane_cluster[@]}" "${pool[@]}")
  lane_cluster=() pool=()
fi

rm -rf "$LOGS"
mkdir -p "$LOGS/state"
state=$LOGS/state
check_start=$(date +%s)

duration() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# show LANE STAGE RESULT SECONDS: the stage's block, printed whole under a lock so that the
# lanes' blocks never interleave.
show() {
  local lane=$1 stage=$2 result=$3 secs=$4 log=$LOGS/$2.log prefix lines
  prefix=$(printf '[%s]%*s' "$lane" $((8 - ${#lane})) '')
  lines=$(wc -l <"$log")
  {
    flock 8
    echo "$prefix===== $stage: $result in $(duration "$secs") (log: $log) ====="
    if [[ $result == PASS ]] && ((lines > PRINT_LINES)); then
      echo "$prefix... the first $((lines - PRINT_LINES)) of $lines lines are only in $log"
      tail -n "$PRINT_LINES" "$log" | sed "s/^/$prefix/"
    else
      sed "s/^/$prefix/" "$log"
    fi
    echo "$prefix===== $stage: $result in $(duration "$secs") ====="
  } 8>"$state/print.lock"
}

# run_stage LANE STAGE: runs `make STAGE` in a process group of its own (so that stopping the
# lane stops all of it), records its result and time in $state, prints its block. Returns the
# stage's exit status.
run_stage() {
  local lane=$1 stage=$2 start rc=0 vars=()
  [[ -n "${stage_vars[$stage]:-}" ]] && read -r -a vars <<<"${stage_vars[$stage]}"
  start=$(date +%s)
  { flock 8; printf "[%s]%*s%s started (log: %s)\n" "$lane" $((8 - ${#lane})) "" "$stage" "$LOGS/$stage.log"; } 8>"$state/print.lock"
  setsid "$MAKE" --no-print-directory "$stage" "${vars[@]}" >"$LOGS/$stage.log" 2>&1 </dev/null &
  echo "$! $stage" >"$state/running-$lane"
  wait $! || rc=$?
  rm -f "$state/running-$lane"
  local secs=$(($(date +%s) - start)) result=PASS
  if ((rc != 0)); then
    result="FAIL (exit $rc)"
    [[ -e "$state/stop" ]] && result="STOPPED ($(cat "$state/stop"))"
  fi
  echo "$stage $lane $secs ${result%% *}" >>"$state/times"
  show "$lane" "$stage" "$result" "$secs"
  return "$rc"
}

# lane NAME STAGE...: the lane's stages, then pool stages until none is left; ends at the first
# failure (recorded in $state/failed: the first one of either lane wins) or when the other lane
# failed.
lane() {
  local name=$1 stage
  shift
  for stage in "$@" "${pool[@]}"; do
    [[ -e "$state/stop" ]] && return 1
    if [[ " ${pool[*]} " == *" $stage "* ]]; then
      mkdir "$state/claim-$stage" 2>/dev/null || continue # the other lane has it
    fi
    if ! run_stage "$name" "$stage"; then
      [[ -e "$state/stop" ]] || { mkdir "$state/failed" 2>/dev/null && echo "$stage $name" >"$state/failed/stage"; }
      return 1
    fi
  done
}

# stop_lanes NAME...: stops the lanes' running stages (SIGTERM to each stage's process group,
# SIGKILL after CHECK_STOP_GRACE seconds, default 60) and waits for the lanes to end. A stopped
# cluster stage may leave its node (a go test binary killed runs no TestMain): down.sh removes
# it. A lane's pid is in lane_pids; "main" without one is the stage before the lanes (verify-mod).
stop_lanes() {
  local deadline n stage_pid _ alive
  deadline=$(($(date +%s) + ${CHECK_STOP_GRACE:-60}))
  declare -A signalled=() killed=()
  while :; do
    alive=false
    for n in "$@"; do
      if [[ -n "${lane_pids[$n]:-}" ]]; then
        kill -0 "${lane_pids[$n]}" 2>/dev/null || continue
        alive=true
        read -r stage_pid _ 2>/dev/null <"$state/running-$n" || continue
      else
        read -r stage_pid _ 2>/dev/null <"$state/running-$n" || continue
        kill -0 "$stage_pid" 2>/dev/null || continue
        alive=true
      fi
      # One SIGTERM per stage: a second one would hit the cleanup the first one started (the
      # EXIT trap of hack/k8s-e2e.sh removing its node).
      if [[ "${signalled[$n]:-}" != "$stage_pid" ]]; then
        kill -TERM -- -"$stage_pid" 2>/dev/null || true
        signalled[$n]=$stage_pid
      elif [[ -z "${killed[$n]:-}" ]] && (($(date +%s) >= deadline)); then
        kill -KILL -- -"$stage_pid" 2>/dev/null || true
        killed[$n]=1
      fi
    done
    $alive || break
    sleep 1
  done
  for n in "$@"; do
    [[ -z "${lane_pids[$n]:-}" ]] || wait "${lane_pids[$n]}" 2>/dev/null || true
    [[ $n != cluster ]] || down_clusters
  done
}

down_clusters() {
  local c n net veth
  for c in "${cluster_names[@]}"; do
    read -r n net veth <<<"$c"
    if [[ -d "/var/tmp/$n" || -e "/run/netns/$n" ]]; then
      echo "[cluster] removing the node $n left by the stopped stage (hack/cluster/down.sh)"
      CLUSTER_NAME=$n CLUSTER_NET=$net CLUSTER_VETH=$veth bash hack/cluster/down.sh ||
        echo "[cluster] $n not removed: CLUSTER_NAME=$n CLUSTER_VETH=$veth bash hack/cluster/down.sh" >&2
    fi
  done
}

declare -A lane_pids=()
# Interrupted (a CI cancel, ^C): stop the running stages and the nodes, as after a failure. The
# stages run in sessions of their own, out of reach of the terminal's ^C.
interrupted() {
  trap - INT TERM
  echo "make check was interrupted" >"$state/stop"
  echo "make check: interrupted: stopping the lanes" >&2
  if ((${#lane_pids[@]})); then
    stop_lanes "${!lane_pids[@]}"
  else
    stop_lanes main
  fi
  exit 130
}
trap interrupted INT TERM

# why_failed STAGE: the lines of its log that say why it failed (a panic and its first frames, a
# failed test and the file:line messages above it, a build error), at most 30, so that the end of
# make check's output, which is all some CI views keep, names the cause and not only the stage.
why_failed() {
  echo
  echo "make check: why $1 failed (from $LOGS/$1.log)"
  grep -E -A4 '^(panic:|fatal error:)' "$LOGS/$1.log" | head -n 10 || true
  grep -E '^[[:space:]]*(--- FAIL|[[:alnum:]_./-]+\.go:[0-9]+:)|^FAIL[[:space:]]|signal: killed|^make(\[[0-9]+\])?: \*\*\*' "$LOGS/$1.log" |
    cut -c1-300 | tail -n 20 || true
}

summary() {
  local verdict=$1 stage lane secs result
  echo
  echo "make check: the go test summary lines of every stage"
  while read -r stage _; do
    grep -hE '^(ok|FAIL)[[:space:]]|^--- FAIL:' "$LOGS/$stage.log" || true
  done <"$state/times"
  [[ -z "${failed_stage:-}" ]] || why_failed "$failed_stage"
  echo
  echo "make check: stages (lane, result, time)"
  while read -r stage lane secs result; do
    printf '  %-16s %-8s %-8s %s\n' "$stage" "$lane" "$result" "$(duration "$secs")"
  done <"$state/times"
  echo "$verdict"
}

# 1. verify-mod, alone.
for stage in "${first[@]}"; do
  if ! run_stage main "$stage"; then
    failed_stage=$stage
    summary "make check: FAIL: stage $stage failed; its log: $LOGS/$stage.log"
    exit 1
  fi
done

# 2. the lanes.
cluster_lane=false
if ((${#lane_cluster[@]})); then
  lane cluster "${lane_cluster[@]}" &
  lane_pids[cluster]=$!
  cluster_lane=true
fi
lane main "${lane_main[@]}" &
lane_pids[main]=$!

failed=false
while ((${#lane_pids[@]})); do
  done_pid=
  wait -n -p done_pid "${lane_pids[@]}" || failed=true
  for n in "${!lane_pids[@]}"; do
    [[ "${lane_pids[$n]}" == "$done_pid" ]] && unset "lane_pids[$n]"
  done
  if $failed && [[ ! -e "$state/stop" ]]; then
    echo "a stage of the other lane failed" >"$state/stop"
    if ((${#lane_pids[@]})); then
      echo "make check: a stage failed: stopping the ${!lane_pids[*]} lane" >&2
      stop_lanes "${!lane_pids[@]}"
      lane_pids=()
    fi
  fi
done
trap - INT TERM
# A node its stage could not remove (a go test timeout panics past TestMain's Down) is not left
# on the machine: down.sh, for each that is still there.
if $cluster_lane; then
  down_clusters
fi

wall=$(($(date +%s) - check_start))
if [[ -e "$state/failed/stage" ]]; then
  read -r stage lane <"$state/failed/stage"
  failed_stage=$stage
  summary "make check: FAIL: stage $stage ($lane lane) failed after $(duration "$wall"); its log: $LOGS/$stage.log"
  exit 1
elif $failed; then
  summary "make check: FAIL after $(duration "$wall"): a lane ended without a result (see above)"
  exit 1
fi
summary "make check: PASS in $(duration "$wall") ($(wc -l <"$state/times") stages; logs in $LOGS)"
