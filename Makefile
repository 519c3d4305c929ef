GO ?= go
BIN := bin
# Go ignores directories starting with _: the campaign copies .go provenance files.
DEMO_DIR ?= _demo
# go-nvml's cgo wrappers call NVML functions the header marks deprecated.
export CGO_CFLAGS ?= -O2 -Wno-deprecated-declarations

.PHONY: build test race demo demo-manifests demo-slurm fuzz bench clean man slurm-up slurm-down screenshots

build:
	$(GO) build -o $(BIN)/ ./cmd/...

# The Slurm tests skip without a cluster; a passing package prints nothing,
# so they note the skips in a file, printed here (go test's status kept).
# The Slurm tests share one cluster and run one at a time, mostly waiting
# on Slurm: they run in a go test of their own beside the rest (whose
# tests run in parallel), and their output follows the rest's.
test: build
	$(GO) vet ./...
	@note=$$(mktemp); slurmlog=$$(mktemp); \
	WARDEN_SLURM_SKIP_NOTE=$$note $(GO) test -count=1 -timeout 30m -run '^TestSlurm' ./cmd/controller > $$slurmlog 2>&1 & slurm=$$!; \
	WARDEN_SLURM_SKIP_NOTE=$$note $(GO) test -count=1 -timeout 30m -skip '^TestSlurm' ./...; rc=$$?; \
	wait $$slurm; src=$$?; echo "the Slurm tests (go test -run '^TestSlurm' ./cmd/controller):"; cat $$slurmlog; \
	cat $$note >&2; rm -f $$note $$slurmlog; [ $$rc = 0 ] && [ $$src = 0 ]

# The race detector on every package under pkg/: they hold the goroutines
# (the launcher, the load generator, the store, the samplers, the
# campaign loop and its executors). Then the end-to-end tests, whose
# binaries are built with -race under go test -race: -short leaves out
# the crash tests (a campaign per failpoint, the same code killed at each
# point; make test runs them), and the Slurm tests run in make test only.
# The two run side by side: the packages' tests compute, the end-to-end
# ones mostly wait on their processes (on two CPUs: 216 s and 322 s one
# after the other). The end-to-end output is printed after the packages'.
race:
	@e2e=$$(mktemp); \
	$(GO) test -count=1 -race -short -skip '^TestSlurm' -timeout 30m ./cmd/controller > $$e2e 2>&1 & e2epid=$$!; \
	$(GO) test -count=1 -race -timeout 30m ./pkg/...; rc=$$?; \
	wait $$e2epid; erc=$$?; echo "the end-to-end tests under the race detector (go test -race -short ./cmd/controller):"; cat $$e2e; rm -f $$e2e; \
	[ $$rc = 0 ] && [ $$erc = 0 ]

# demo-campaign DIR,FLAGS: the demo campaign started detached in DIR (made
# afresh) with the extra controller start FLAGS, watched live until the
# controller exits, then summarized.
define demo-campaign
	rm -rf $(1)
	$(BIN)/controller start -f protocols/demo.yaml -d $(1) --gpu-backend fake $(2)
	$(BIN)/ctlq watch -d $(1)
	$(BIN)/ctlq status -d $(1)
	$(BIN)/ctlq runs -d $(1)
endef

# The demo's manifests, materialized by bin/loadgen.
demo-manifests: build
	mkdir -p _demo_manifests
	$(BIN)/loadgen materialize --id short --input-uniform 4:16 --output-fixed 8 --arrival steady \
		--num-requests 6000 --workload-seed 20261130 --out _demo_manifests/short.jsonl
	$(BIN)/loadgen materialize --id long --input-uniform 4:16 --output-fixed 64 --arrival burst:8 \
		--num-requests 2000 --workload-seed 20261130 --out _demo_manifests/long.jsonl

# A demo campaign on the stand-in server and fake GPUs, driven by
# bin/loadgen.
demo: demo-manifests
	$(call demo-campaign,$(DEMO_DIR))

# The demo on the local Slurm cluster (make slurm-up): each attempt a Slurm
# step, its node-side runner reporting to the controller.
DEMO_SLURM_DIR ?= _demo_slurm
demo-slurm: demo-manifests
	$(call demo-campaign,$(DEMO_SLURM_DIR),--executor slurm)

# The report screenshots in docs/screenshots/, made afresh by
# scripts/screenshots.sh: the demo run to its end, stopped for review and
# crashed, and the phase-3 protocol on stand-ins (a host of 8 CPUs or more), each
# campaign's report photographed by headless Chromium. `scripts/screenshots.sh
# campaigns` and `shoot` do the two halves apart (SHOTS_DIR: where the
# campaigns are, default _shots).
screenshots: build demo-manifests
	scripts/screenshots.sh

# Man pages of every command, generated from the commands' help.
man: build
	$(BIN)/controller man $(BIN)/man
	$(BIN)/ctlq man $(BIN)/man

# A two-node Slurm cluster with four fake GPUs per node on this machine
# (Debian 12, as root): scripts/slurm-cluster.sh install first.
slurm-up:
	scripts/slurm-cluster.sh up

slurm-down:
	scripts/slurm-cluster.sh down

fuzz:
	$(GO) test -run XXX -fuzz FuzzPlan -fuzztime 10m ./protocols

bench:
	$(GO) test -run XXX -bench . -benchtime 20x ./protocols ./pkg/state

clean:
	rm -rf $(BIN) $(DEMO_DIR) $(DEMO_SLURM_DIR) _demo_manifests _shots
