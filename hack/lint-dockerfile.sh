#!/usr/bin/env bash
# Lints Dockerfile and .dockerignore without a Docker engine.
#
# hack/dockerfile-lint (a nested Go module: BuildKit from the Go module proxy, kept out of the
# main module's vendor/) checks:
#   1. BuildKit's Dockerfile checks, i.e. the rules of `docker build --check`
#      (JSONArgsRecommended, UndefinedVar, FromAsCasing, WorkdirRelativePath,
#      SecretsUsedInArgOrEnv, InvalidDefaultArgInFrom, ... and the experimental ones), with an
#      offline table of base-image configs instead of a registry. The Dockerfile's own
#      `# check=error=true` directive makes a real buildx build fail on the same findings.
#   2. Project policy: golang builder stage that builds ./cmd/csi-resizer and
#      ./cmd/statefulset-resizer and ./cmd/volume-autoscaler with CGO_ENABLED=0 -mod=vendor -trimpath -ldflags
#      "-s -w -X main.version=${VERSION}"; final stage gcr.io/distroless/static-debian12:nonroot
#      with only COPY --from=builder of /csi-resizer, /statefulset-resizer and /volume-autoscaler, USER 0:0 (as upstream),
#      exec-form ENTRYPOINT ["/csi-resizer"], no RUN; tagged (not :latest) base images; no ADD;
#      no downloads (apt-get, curl, go mod download) in RUN.
#   3. .dockerignore keeps every file `go build` reads for both binaries on linux/amd64 and
#      linux/arm64 (from `go list -deps -mod=vendor`), plus go.mod, go.sum, vendor/modules.txt.
# It cannot check that the image builds or runs: that needs a Docker engine.
#
# hadolint runs too when it is on PATH (it is neither in Debian nor on the Go module proxy).
#
# Usage: hack/lint-dockerfile.sh        (first run downloads BuildKit's modules, ~1 min)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The nested module is not vendored: override a caller's GOFLAGS=-mod=vendor. go.sum is
# committed and complete, so the build never rewrites it.
(cd "$root/hack/dockerfile-lint" && GOFLAGS=-mod=readonly GOWORK=off go run . -root "$root")

if command -v hadolint >/dev/null 2>&1; then
  echo "lint-dockerfile: hadolint $(hadolint --version 2>/dev/null | head -n1)"
  hadolint "$root/Dockerfile"
else
  echo "lint-dockerfile: hadolint not installed, skipped"
fi
