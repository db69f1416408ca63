# csi-resizer build and test entry points. `make help` lists them.
SHELL := /usr/bin/env bash
GO ?= go
export GOFLAGS := -mod=vendor
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
BIN := bin
FUZZTIME ?= 30s
# Integration: how long the whole suite may take, which tests (-run) to run, and which to leave
# out (-skip; make check leaves out TestManifests*, which its manifests-check stage runs).
INTEGRATION_TIMEOUT ?= 45m
RUN ?= .
INTEGRATION_SKIP ?=
IMAGE ?= csi-resizer:$(VERSION)
# The soak (make soak): how many PVCs, how long the chaos lasts, which seed draws it, and where
# the JSON figures go. docs/reliability.md describes it.
SOAK_PVCS ?= 300
SOAK_DURATION ?= 20m
SOAK_SEED ?= 1
SOAK_REPORT ?= $(BIN)/soak-report.json
# csi-driver-host-path's hostpathplugin, the real CSI driver the e2e suite runs against besides
# the mock (test-e2e-hostpath). CI has it next to the clone; a clone without it skips those runs,
# except under CI=true, where a missing driver fails them.
HOSTPATH_PLUGIN ?= ../shared/anchors/hostpathplugin
# Upstream external-resizer's binary, measured next to csi-resizer by bench and bench-smoke
# (empty: csi-resizer alone). Default: the anchor binary next to the checkout, when present.
UPSTREAM_RESIZER ?= $(if $(wildcard ../shared/anchors/external-resizer),$(abspath ../shared/anchors/external-resizer))

COMMANDS := $(notdir $(wildcard cmd/*))

.PHONY: help build test test-fuzz verify verify-mod verify-code vulncheck check-rules test-integration test-e2e test-e2e-hostpath soak soak-ci demo bench bench-smoke bench-node bench-node-autoscalers manifests-render manifests-check helm-check lint-dockerfile image cluster cluster-down cluster-images cluster-deploy-hostpath test-cluster check clean cluster-hostpath-small-fs

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

build: ## build every binary of cmd/ into bin/
	@mkdir -p $(BIN)
	@for c in $(COMMANDS); do echo "go build $$c"; CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/$$c ./cmd/$$c || exit 1; done

test: ## unit tests, with the race detector; then the re-create's interleaving test, without it (it explores thousands of states)
	$(GO) test -race -count=1 -skip '^TestRecreateInterleavings$$' ./...
	$(GO) test -count=1 -run '^TestRecreateInterleavings$$' -v ./pkg/statefulset/controller/ | grep -E '^(---|ok|FAIL|PASS)|states|trace|^ {6,}|I[1-6]:|settled'; exit $${PIPESTATUS[0]}

test-fuzz: ## run the decision fuzzers (expansion, modification, statefulset-resizer, its webhook, volume-autoscaler), FUZZTIME each (default 30s)
	$(GO) test ./pkg/expand -run '^$$' -fuzz '^FuzzPlanExpansion$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/modify -run '^$$' -fuzz '^FuzzDecideInvariants$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/statefulset/plan -run '^$$' -fuzz '^FuzzDecideInvariants$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/statefulset/webhook -run '^$$' -fuzz '^FuzzDecideInvariants$$' -fuzztime $(FUZZTIME)
	$(GO) test ./pkg/autoscale/policy -run '^$$' -fuzz '^FuzzDecide$$' -fuzztime $(FUZZTIME)

verify: verify-mod verify-code ## gofmt, go vet (all build tags), go mod tidy + vendor leave no diff, govulncheck

verify-mod: ## go mod tidy + go mod vendor leave go.mod, go.sum and vendor/ unchanged
	@# Run in place on purpose: when they change something, the change is left for review and commit.
	@GOFLAGS=-mod=mod $(GO) mod tidy && GOFLAGS=-mod=mod $(GO) mod vendor; \
	  if ! git diff --quiet -- go.mod go.sum vendor || [ -n "$$(git status --porcelain -- vendor)" ]; then \
	    echo "go mod tidy / go mod vendor changed go.mod, go.sum or vendor/ (left in the tree): review and commit them"; git status --short -- go.mod go.sum vendor | head; exit 1; fi

verify-code: ## gofmt, go vet (all build tags), govulncheck
	@out=$$(git ls-files -co --exclude-standard -- '*.go' ':!vendor/**' ':!test/k8s-bins/**' | xargs gofmt -l); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	@$(MAKE) --no-print-directory vulncheck

vulncheck: ## govulncheck, when its database is reachable from this machine
	@bash hack/vulncheck.sh

check-rules: ## promtool check + unit tests of the shipped Prometheus rules (installs prometheus if missing)
	bash hack/check-prometheus-rules.sh

test-integration: ## integration tests on a real etcd + kube-apiserver (+ controller-manager) and a real CSI driver process
	bash hack/build-k8s-bins.sh >/dev/null
	$(GO) test -tags integration -count=1 -p 1 -timeout $(INTEGRATION_TIMEOUT) -run '$(RUN)' $(if $(INTEGRATION_SKIP),-skip '$(INTEGRATION_SKIP)') ./test/framework/... ./test/integration/... ./test/e2e/... ./test/demo/... ./test/soak/...
	@# The e2e suite again, with the mock answering node_expansion_required=true the way
	@# csi-driver-host-path does by default: the suite's node-expansion path runs in CI too.
	@# Not TestModify*: it never expands, so the answer changes nothing in it and the run above
	@# ran it on the same mock already.
	E2E_DRIVER_CMD= E2E_DRIVER_ENDPOINT= E2E_MOCK_NODE_EXPANSION_REQUIRED=true \
	  $(GO) test -tags integration -count=1 -p 1 -timeout $(INTEGRATION_TIMEOUT) -run '$(RUN)' -skip '^TestModify' ./test/e2e/...
	@$(MAKE) --no-print-directory test-e2e-hostpath

test-e2e: ## driver-agnostic e2e suite: make test-e2e DRIVER_CMD="..." DRIVER_NAME=... INFEASIBLE_SIZE=2Ti [NODE_EXPANSION_REQUIRED=true] [MODIFY_PARAMETERS=iops=3000 INFEASIBLE_MODIFY_PARAMETERS=tier=gold]
	@# Checked before the (cold: ~10 min) build; the suite's TestMain checks it again for go test users.
	@if [ -n "$(if $(strip $(DRIVER_CMD)$(DRIVER_ENDPOINT)),external)" ] && [ -z "$(strip $(INFEASIBLE_SIZE))" ]; then \
	  echo "test-e2e: a real driver needs INFEASIBLE_SIZE, a size it refuses with INVALID_ARGUMENT, OUT_OF_RANGE or NOT_FOUND (e.g. INFEASIBLE_SIZE=2Ti)" >&2; exit 2; fi
	bash hack/build-k8s-bins.sh >/dev/null
	E2E_DRIVER_CMD="$(DRIVER_CMD)" E2E_DRIVER_NAME="$(DRIVER_NAME)" E2E_DRIVER_ENDPOINT="$(DRIVER_ENDPOINT)" E2E_INFEASIBLE_SIZE="$(INFEASIBLE_SIZE)" \
	  E2E_NODE_EXPANSION_REQUIRED="$(NODE_EXPANSION_REQUIRED)" \
	  E2E_MODIFY_PARAMETERS="$(MODIFY_PARAMETERS)" E2E_MODIFY_INFEASIBLE_PARAMETERS="$(INFEASIBLE_MODIFY_PARAMETERS)" \
	  $(GO) test -tags integration -count=1 -timeout 30m -v ./test/e2e/...

# The e2e suite against hostpathplugin: with its defaults (controller expansion answering
# node_expansion_required=true, so the suite plays the kubelet's NodeExpandVolume), then node-only
# (--disable-controller-expansion: the node refuses the infeasible size). --max-volume-size=10Gi
# makes 20Gi the infeasible size, refused with OUT_OF_RANGE on both sides. Then the
# VolumeAttributesClass test (TestModify*; the whole suite only when RUN selects it) with
# --enable-controller-modify-volume: the driver accepts iops and throughput and refuses any other
# parameter name (tier) with INVALID_ARGUMENT; E2E_MODIFY_REQUIRED fails the test, instead of
# skipping it, when the driver does not advertise MODIFY_VOLUME.
HOSTPATH_CMD = $(abspath $(HOSTPATH_PLUGIN)) --endpoint={endpoint} --nodeid=e2e-node --statedir={statedir} -v=5 --max-volume-size=10737418240
HOSTPATH_E2E = E2E_DRIVER_ENDPOINT= E2E_MOCK_NODE_EXPANSION_REQUIRED= E2E_DRIVER_NAME=hostpath.csi.k8s.io E2E_INFEASIBLE_SIZE=20Gi \
  $(GO) test -tags integration -count=1 -p 1 -timeout $(INTEGRATION_TIMEOUT) -run '$(RUN)' ./test/e2e/...
HOSTPATH_MODIFY_E2E = E2E_DRIVER_ENDPOINT= E2E_MOCK_NODE_EXPANSION_REQUIRED= E2E_DRIVER_NAME=hostpath.csi.k8s.io E2E_INFEASIBLE_SIZE=20Gi \
  E2E_DRIVER_CMD="$(HOSTPATH_CMD) --enable-controller-modify-volume --accepted-mutable-parameter-names=iops,throughput" \
  E2E_NODE_EXPANSION_REQUIRED=true E2E_MODIFY_REQUIRED=true E2E_MODIFY_PARAMETERS=iops=3000,throughput=125 E2E_MODIFY_INFEASIBLE_PARAMETERS=tier=gold \
  $(GO) test -tags integration -count=1 -p 1 -timeout $(INTEGRATION_TIMEOUT) -run '$(if $(filter .,$(RUN)),^TestModify,$(RUN))' ./test/e2e/...

test-e2e-hostpath: ## the e2e suite against csi-driver-host-path (HOSTPATH_PLUGIN=path/to/hostpathplugin): controller + node step, node-only, then VolumeAttributesClass modification
ifeq ($(wildcard $(HOSTPATH_PLUGIN)),)
	@if [ "$(CI)" = true ]; then \
	  echo "test-e2e-hostpath: FAIL: no csi-driver-host-path at $(HOSTPATH_PLUGIN); CI must run the e2e suite against it (set HOSTPATH_PLUGIN=path/to/hostpathplugin)" >&2; exit 1; fi
	@echo "test-e2e-hostpath: skipped: no csi-driver-host-path at $(HOSTPATH_PLUGIN) (set HOSTPATH_PLUGIN=path/to/hostpathplugin to run the e2e suite against it)"
else
	bash hack/build-k8s-bins.sh >/dev/null
	E2E_DRIVER_CMD="$(HOSTPATH_CMD)" E2E_NODE_EXPANSION_REQUIRED=true $(HOSTPATH_E2E)
	E2E_DRIVER_CMD="$(HOSTPATH_CMD) --disable-controller-expansion" E2E_NODE_EXPANSION_REQUIRED= $(HOSTPATH_E2E)
	$(HOSTPATH_MODIFY_E2E)
endif

soak: ## the soak: 2 leader-elected resizers, random driver faults, kills, freezes, apiserver/etcd restarts; checks the KEP-1790 invariants (SOAK_PVCS=300 SOAK_DURATION=20m SOAK_SEED=1)
	bash hack/build-k8s-bins.sh >/dev/null
	@mkdir -p $(dir $(SOAK_REPORT))
	SOAK=1 SOAK_PVCS=$(SOAK_PVCS) SOAK_DURATION=$(SOAK_DURATION) SOAK_SEED=$(SOAK_SEED) SOAK_REPORT=$(abspath $(SOAK_REPORT)) \
	  $(GO) test -tags integration -count=1 -p 1 -timeout 3h -v -run '^TestSoak' ./test/soak/

soak-ci: ## the short fixed-seed soak CI runs (60 PVCs, 3 minutes of chaos, seed 1; about 4 minutes in all)
	$(MAKE) soak SOAK_PVCS=60 SOAK_DURATION=3m SOAK_SEED=1 SOAK_REPORT=$(BIN)/soak-ci/soak-report.json

demo: ## newcomer's first command: local control plane + mock driver + csi-resizer, a resize, an infeasible request and its recovery, a VolumeAttributesClass change and a refused one rolled back, and the README's GitOps steps (statefulset-resizer webhook, kubectl apply of a bigger StatefulSet volume, wait)
	bash hack/demo.sh

bench: ## benchmarks on the real control plane, side by side with UPSTREAM_RESIZER when set (not part of CI pass/fail); writes a table and JSON
	bash hack/build-k8s-bins.sh >/dev/null
	@echo "upstream external-resizer: $(or $(UPSTREAM_RESIZER),not measured (UPSTREAM_RESIZER unset and ../shared/anchors/external-resizer absent))"
	UPSTREAM_RESIZER="$(UPSTREAM_RESIZER)" $(GO) test -tags integration -count=1 -timeout 90m -run '^$$' -bench . -benchtime 1x ./test/bench/... $(BENCHFLAGS)

bench-smoke: ## a small run of every benchmark (upstream's side too when UPSTREAM_RESIZER is set), so they cannot rot
	$(GO) test ./pkg/expand -run '^$$' -bench . -benchtime 100x
	bash hack/build-k8s-bins.sh >/dev/null
	@echo "upstream external-resizer: $(or $(UPSTREAM_RESIZER),not measured (UPSTREAM_RESIZER unset and ../shared/anchors/external-resizer absent))"
	BENCH_SMOKE=1 UPSTREAM_RESIZER="$(UPSTREAM_RESIZER)" $(GO) test -tags integration -count=1 -timeout 30m -run '^$$' -bench . -benchtime 1x ./test/bench/...

# The real-node benchmark (docs/benchmarks.md, "On the real node"): how many mounted PVCs each
# image resizes. Root; a one-node cluster of its own (CLUSTER_NAME, CLUSTER_NET, CLUSTER_VETH).
BENCH_NODE_PVCS ?= 50
bench-node: ## resize BENCH_NODE_PVCS (50) mounted PVCs on the one-node cluster with the product image and upstream v2.2.1 as csi-driver-host-path's csi-resizer; writes the "On the real node" section of docs/benchmarks.md and docs/benchmarks.json
	bash hack/build-k8s-bins.sh >/dev/null
	BENCH_NODE=1 BENCH_NODE_PVCS=$(BENCH_NODE_PVCS) $(GO) test -tags integration -count=1 -timeout 60m -run '^$$' -bench '^BenchmarkRealNode$$' -benchtime 1x ./test/bench/ $(BENCHFLAGS)

# volume-autoscaler against topolvm/pvc-autoresizer v0.21.0 (../shared/anchors, its own chart, with
# the Prometheus it needs) on the same fills (docs/benchmarks.md, "volume-autoscaler and
# pvc-autoresizer on the real node"). Root; a one-node cluster of its own.
BENCH_AUTOSCALERS_CYCLES ?= 5
bench-node-autoscalers: ## volume-autoscaler and pvc-autoresizer v0.21.0 + Prometheus side by side on the one-node cluster: time from crossing the threshold to the new request, CPU and memory of everything each needs; writes bin/bench-node-autoscalers.md
	mkdir -p bin
	BENCH_AUTOSCALERS=1 BENCH_AUTOSCALERS_CYCLES=$(BENCH_AUTOSCALERS_CYCLES) BENCH_AUTOSCALERS_OUT=$(CURDIR)/bin/bench-node-autoscalers.md \
		RUN='^TestAutoscalersSideBySide$$' bash hack/cluster/test.sh

manifests-render: ## kustomize-render and check every deploy/ base, without a cluster
	bash hack/manifests-check.sh

manifests-check: manifests-render ## manifests-render, then server-side dry-run every render and check the shipped RBAC on a real kube-apiserver (TestManifests*)
	bash hack/build-k8s-bins.sh >/dev/null
	$(GO) test -tags integration -count=1 -p 1 -timeout 15m -run '^TestManifests' ./test/integration/

helm-check: ## helm lint + render the Helm charts deploy/helm/statefulset-resizer and deploy/helm/volume-autoscaler and check them against their kustomize bases (builds helm from the module proxy, cached)
	bash hack/helm-check.sh

lint-dockerfile: ## static checks of the Dockerfile (no Docker engine needed)
	bash hack/lint-dockerfile.sh

image: ## build the container image (needs a Docker engine)
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE) .

# The one-node cluster (docs/cluster.md): a real kubelet, containerd and kube-proxy next to the
# control plane, in network and mount namespaces of their own, images assembled offline. Root.
cluster: ## start the one-node cluster (kubelet, containerd 2, runc, CNI bridge, control plane; own netns and mount ns) and leave it running; prints the kubeconfig
	bash hack/cluster/up.sh

cluster-down: ## stop the one-node cluster and remove everything it made (processes, mounts, netns, cgroups, its directory)
	bash hack/cluster/down.sh

cluster-images: ## assemble the cluster's images offline (product image from the Dockerfile's recipe, pause, busybox, csi-driver-host-path and its sidecars); prints the tarballs
	bash hack/cluster/build-images.sh

test-cluster: ## the test/cluster suite on a one-node cluster it starts and removes (kubelet, containerd; docs/cluster.md); skipped in one line where a node cannot run, except under CI=true
	RUN='$(RUN)' bash hack/cluster/test.sh

cluster-deploy-hostpath: ## deploy csi-driver-host-path on the running cluster with its own kubernetes-1.34 manifests and RBAC, and a StorageClass csi-hostpath-sc
	bash hack/cluster/deploy-hostpath.sh

SIZE_MI ?= 300
cluster-hostpath-small-fs: ## give csi-driver-host-path's data directory a small XFS of its own so volumes can fill (SIZE_MI=300), grow it as a node expansion would (GROW_MI=364), or remove it (REMOVE=1)
	@if [ -n '$(GROW_MI)' ]; then bash hack/cluster/hostpath-small-fs.sh --grow '$(GROW_MI)'; \
	elif [ -n '$(REMOVE)' ]; then bash hack/cluster/hostpath-small-fs.sh --remove; \
	else bash hack/cluster/hostpath-small-fs.sh '$(SIZE_MI)'; fi

# Kubernetes' own storage e2e tests (docs/k8s-e2e.md) on a one-node cluster of their own, with our
# csi-resizer and upstream's. Root.
.PHONY: test-k8s-e2e test-k8s-e2e-ci
K8S_E2E_RESIZERS ?= ours
test-k8s-e2e: ## Kubernetes' own storage e2e tests (every resize/modify spec of e2e.test v1.36.3 that runs on one node: CSI Mock volume expansion, volume-expand, volume-modify(-stress), ephemeral expansion, VAC ResourceQuota) with our csi-resizer and upstream's; rewrites docs/k8s-e2e.md's table
	bash hack/k8s-e2e.sh

test-k8s-e2e-ci: ## the subset of test-k8s-e2e CI runs (Expansion with recovery, volume-expand, volume-modify), with K8S_E2E_RESIZERS (default: ours, as make check runs it; "ours upstream" for both), docs untouched
	K8S_E2E_RESIZERS='$(K8S_E2E_RESIZERS)' bash hack/k8s-e2e.sh --ci

# make check runs these stages (hack/check.sh): verify-mod alone (it rewrites vendor/ in place),
# then two lanes side by side, the cluster suites in one and the rest (verify-code first) in the
# other, soak-ci and bench-smoke in whichever is free first. helm-check before test: it builds
# helm, which test's deploy/helm tests need under CI=true. Each stage's log is in bin/check/.
check: ## everything CI runs: verify-mod, then two lanes at once (test-cluster, test-k8s-e2e-ci | verify-code helm-check test test-fuzz check-rules lint-dockerfile manifests-check test-integration; soak-ci, bench-smoke in either); logs in bin/check/
	MAKE='$(MAKE)' bash hack/check.sh

clean:
	rm -rf $(BIN)
