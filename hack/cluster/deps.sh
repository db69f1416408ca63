#!/usr/bin/env bash
# Installs, from Debian's packages, what the one-node cluster takes from the machine rather than
# building it: runc, the CNI plugins (bridge, host-local, loopback, portmap), iptables and
# conntrack (kube-proxy, portmap), busybox-static and socat (put into images), openssl (the
# cluster's certificates). A machine that has them all is left alone; as root, on a fresh
# machine, this is what .ci/run would do.
set -euo pipefail

# command-or-file package
needs=(
  "runc runc"
  "/usr/lib/cni/bridge containernetworking-plugins"
  "iptables iptables"
  "conntrack conntrack"
  "/bin/busybox busybox-static"
  "socat socat"
  "openssl openssl"
  "curl curl"
  "ip iproute2"
  "nsenter util-linux"
  "losetup mount"
  "flock util-linux"
  "/etc/ssl/certs/ca-certificates.crt ca-certificates"
)
missing=()
for n in "${needs[@]}"; do
  read -r what pkg <<<"$n"
  if [[ "$what" == /* ]]; then
    [[ -e "$what" ]] && continue
  else
    command -v "$what" >/dev/null 2>&1 && continue
  fi
  missing+=("$pkg")
done
((${#missing[@]} == 0)) && exit 0

mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
if [[ $(id -u) -ne 0 ]]; then
  echo "cluster: missing Debian packages ${missing[*]} (install them as root)" >&2
  exit 1
fi
echo "cluster: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
