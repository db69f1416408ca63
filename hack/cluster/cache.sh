# shellcheck shell=bash
# Sourced by the cluster's build scripts (hack/build-node-bins.sh, hack/build-containerd.sh,
# hack/build-sidecars.sh, hack/cluster/build-images.sh): one way to build something once per set of
# inputs and keep it in ${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer, the way
# hack/build-k8s-bins.sh keeps the control plane.
#
#   cached_build NAME HASH BUILD_FUNCTION FILE...
#
# publishes $cache_root/NAME-HASH/out once BUILD_FUNCTION (called with a temp dir as $1) has
# produced every FILE in it, and prints that directory on stdout as the last line. A warm call
# returns at once. Concurrent callers serialize on a lock and the directory appears with one
# atomic rename, so a half-built set is never seen. Directories of the same NAME not used for
# a week are removed (a warm call refreshes the stamp).
#
# The HASH must cover every input of the build (sources, go.mod/go.sum, the build script,
# `go version`): hash_inputs helps.

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/csi-resizer"

# hash_inputs FILE_OR_DIR...: 16 hex digits over `go version`, and the names and contents of
# the files given (directories: their files, recursively, in a fixed order).
hash_inputs() {
  {
    go version
    local p
    for p in "$@"; do
      if [[ -d "$p" ]]; then
        (cd "$p" && find . -type f ! -name '*_test.go' | LC_ALL=C sort | while read -r f; do
          printf '%s\n' "$f"
          cat "$f"
        done)
      else
        printf '%s\n' "$(basename "$p")"
        cat "$p"
      fi
    done
  } | sha256sum | cut -c1-16
}

cached_build() {
  local name=$1 hash=$2 build=$3
  shift 3
  local dir="$cache_root/$name-$hash"
  local out="$dir/out"

  _cache_complete() {
    [[ -f "$out/.complete" ]] || return 1
    local f
    for f in "$@"; do
      [[ -e "$out/$f" ]] || return 1
    done
  }

  if _cache_complete "$@"; then
    touch "$out/.complete" 2>/dev/null || true
    echo "$out"
    return 0
  fi

  mkdir -p "$dir"
  # fd 8: the lock lives as long as this shell; the callers are short scripts.
  exec 8>"$dir/.lock"
  if ! flock -n 8; then
    echo "$name: another build of $dir is running, waiting for it" >&2
    flock 8
  fi
  if _cache_complete "$@"; then
    echo "$out"
    return 0
  fi

  local tmp="$dir/out.tmp.$$"
  rm -rf "$tmp" "$out"
  mkdir -p "$tmp"
  local start
  start=$(date +%s)
  # A subshell with errexit of its own: called as `if ! build`, the build's failing commands
  # would not stop it. Its stdout goes to stderr: stdout carries only the directory.
  local rc
  set +e
  (
    set -e
    "$build" "$tmp"
  ) >&2
  rc=$?
  set -e
  if ((rc != 0)); then
    rm -rf "$tmp"
    echo "$name: build failed" >&2
    return 1
  fi
  local f
  for f in "$@"; do
    if [[ ! -e "$tmp/$f" ]]; then
      rm -rf "$tmp"
      echo "$name: $f missing after the build" >&2
      return 1
    fi
  done
  touch "$tmp/.complete"
  mv "$tmp" "$out"
  echo "$name: built in $(($(date +%s) - start))s into $out" >&2

  # Drop other builds of the same NAME that nobody used for a week.
  find "$cache_root" -mindepth 3 -maxdepth 3 -path "$cache_root/$name-*/out/.complete" -mtime +7 2>/dev/null |
    while read -r stale; do
      local stale_dir
      stale_dir=$(dirname "$(dirname "$stale")")
      [[ "$stale_dir" != "$dir" ]] && rm -rf "$stale_dir"
    done
  echo "$out"
}
