#!/usr/bin/env bash
# govulncheck needs its vulnerability database (vuln.go.dev). Where the machine cannot reach it
# (this project's build machines reach only the Go module proxy), say so instead of pretending.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! curl -fsS --max-time 10 -o /dev/null https://vuln.go.dev/index/db.json 2>/dev/null; then
  echo "govulncheck: SKIPPED - the vulnerability database https://vuln.go.dev is not reachable from this machine"
  exit 0
fi
GOFLAGS=-mod=mod go run golang.org/x/vuln/cmd/govulncheck@v1.1.4 ./...
