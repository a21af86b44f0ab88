# huntlb: the two commands a newcomer needs are `make demo` and `make test`.
WASM := target/huntlb_filter.wasm

.PHONY: setup bench-setup setup-k8s image build wasm release test test-rust test-lua test-integration test-slow test-cluster test-k8s demo-k8s setup-llama test-llama demo demo-swarm fuzz bench-tier-cost \
	bench bench-quick bench-many-fronts bench-many-fronts-sim bench-wiki-setup bench-wiki bench-srlb bench-sim bench-elb bench-throughput bench-agent bench-llm-emulator bench-llm-gateways bench-llm bench-llm-pickers lwepp bench-proxies bench-front-scaling bench-vs-least bench-cluster bench-k8s bench-reliability bench-exactly-once clean

CARGO ?= cargo
# Python: the project's own virtual environment, made by `make setup`
# (scripts/setup.sh); every test, benchmark and the demo runs with it.
VENV := .venv
PYTHON := $(CURDIR)/$(VENV)/bin/python
PYTEST ?= $(PYTHON) -m pytest
# tests, benchmarks and the demo import the `harness` package from the repo root
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))

setup:
	./scripts/setup.sh

bench-setup:
	./scripts/setup.sh --bench

# Setup and Helm for the chart's tests (tests/test_kubernetes.py skips without
# it): built from its Go module into .cache/bin, once (docs/kubernetes.md).
setup-k8s:
	./scripts/setup.sh --k8s

# A real Kubernetes cluster (harness/k8scluster.py, docs/kubernetes.md "A real
# cluster here"): three node containers, started, used, torn down with nothing
# left; needs root and Docker. Builds Kubernetes, etcd and CoreDNS the first
# time (scripts/k8s-build.sh, about 40 min on 2 cores), cached after; Helm
# (setup-k8s) for the chart's install on it; the images (make image,
# compose/build.sh) when missing. About 25 min once built. Not in make test.
test-k8s: setup-k8s
	./scripts/docker-setup.sh install
	HUNTLB_K8S_TEST=1 $(PYTEST) -q tests/test_k8s_cluster.py

# huntlb on that cluster under load through what an orchestrator does: the
# chart by docs/kubernetes.md's install, 4 Envoy and 4 HAProxy fronts, a
# rolling restart, a pod deleted, a node drained, 12 -> 16 -> 12, a key
# rotation, fronts restarted (scripts/k8s_demo.py): about 16 min once built.
demo-k8s: setup-k8s
	./scripts/docker-setup.sh install
	$(PYTHON) scripts/k8s_demo.py --build

# The Wikipedia replay's setup (make bench-wiki): the bench's tools and MediaWiki
# with PHP 8.2 under Apache (in every setup too: tests/test_wiki.py needs it).
bench-wiki-setup:
	./scripts/setup.sh --wiki

build: wasm
	$(CARGO) build --workspace --bins

# The proxy-wasm filter Envoy loads (envoy-filter/examples/*.yaml point here).
wasm:
	$(CARGO) build --release --target wasm32-wasip1 -p huntlb-envoy-filter
	cp target/wasm32-wasip1/release/huntlb_envoy_filter.wasm $(WASM)

# The README's test command; CI runs exactly this (after setup).
test: setup build test-rust test-lua test-integration

test-rust:
	$(CARGO) test --workspace

test-lua:
	lua5.3 haproxy-lua/test/run_vectors.lua
	lua5.4 haproxy-lua/test/run_vectors.lua
	lua5.3 haproxy-lua/test/test_upmap.lua
	lua5.4 haproxy-lua/test/test_upmap.lua
	lua5.3 haproxy-lua/test/test_gate.lua
	lua5.4 haproxy-lua/test/test_gate.lua

# TESTS: which tests (pytest node ids), e.g. make test-integration TESTS=tests/test_envoy.py
TESTS ?= tests
test-integration: build
	$(PYTEST) -q --durations=25 -m "not slow and not llama" $(TESTS)

# The tests marked slow (a real 10 s timeout per front, a shortened demo):
# out of make test for its time, run by .ci/run after it (~1.2 min).
test-slow: setup build
	$(PYTEST) -q -m slow tests

# The fleet on an emulated cluster (docs/cluster.md): hosts as network
# namespaces, dnsmasq, faults; needs root; ~1.7 min. .ci/run runs it after make test.
test-cluster: setup build
	HUNTLB_CLUSTER_TEST=1 $(PYTEST) -q tests/test_cluster.py

# A real LLM engine (docs/llm.md "A real engine"): llama-cpp-python's
# OpenAI server, compiled from source by pip into .venv, and a tiny
# random-weight model (scripts/tiny_gguf.py). Not part of make setup or make
# test: 354 s (6 min) on 2 cores the first time, without the multimodal library (pip's download and
# llama.cpp's compile; pip keeps the wheel, so a new .venv on the same machine
# takes seconds); a second run, about a second.
setup-llama: setup
	./scripts/setup-llama.sh

# The agent beside real llama servers (tests/test_llm_real_engine.py; make test
# leaves it out, -m "not llama"): 5 tests, about 11 s.
test-llama: setup-llama build
	$(PYTEST) -q -m llama tests/test_llm_real_engine.py

# the demo runs the vs-least bench's fleet and fronts (bench/srlb.py) at its
# load, 1100 req/s: release builds, as the bench (a debug generator falls behind)
demo: setup release
	PYTHONPATH=$(CURDIR):$(CURDIR)/bench HUNTLB_PROFILE=release $(PYTHON) scripts/demo.py

# The compose fleet as a Docker Swarm stack on three nodes (dockerd-in-docker),
# backends scaled 3 -> 5 -> 3, the agents rolled, a node killed, all under load;
# hunting against the proxies' own least-request, errors per phase, written to
# docs/results/swarm.md (docs/demo.md, "Across nodes"). Needs root; builds the
# compose images (compose/build.sh) and the node image; ~4 min with them built.
demo-swarm: setup
	./scripts/docker-setup.sh install
	$(PYTHON) scripts/swarm_demo.py

# huntlb-agent as a small non-root image (docs/kubernetes.md, "The image"): the
# static musl binary, CA roots and a passwd on scratch, tagged
# huntlb/agent:<version> and :dev. Needs Docker (started for the build and
# stopped after when none runs); tests/test_image.py (HUNTLB_IMAGE_TEST=1) runs it.
image:
	./scripts/docker-setup.sh install
	./scripts/image.sh

# Benchmarks are never part of `make test`. They use release builds and write
# reports to docs/results/ and their runs to bench/data/ (docs/bench.md says what
# each measures and how long it takes).
BENCH := HUNTLB_PROFILE=release $(PYTHON)

release: wasm
	$(CARGO) build --release -p huntlb-agent -p huntlb-instruments

# The headline plot in under 10 minutes, to bench/out/quick/ (docs/results/ untouched).
bench-quick: bench-setup release
	$(BENCH) bench/srlb.py --quick

# Every scenario of the seeds, regenerating docs/results/ (about 85 minutes on 2 cores:
# docs/bench.md gives each part).
bench: bench-srlb bench-sim bench-elb bench-throughput

bench-srlb: bench-setup release
	$(BENCH) bench/srlb.py

bench-sim: bench-setup release
	$(BENCH) bench/simulate.py

bench-elb: bench-setup release
	$(BENCH) bench/elb.py

bench-throughput: bench-setup release
	$(BENCH) bench/throughput.py

# The forwarding tier over 1 to 16 real fronts, both proxies (~100 min;
# docs/results/many-fronts.md).
bench-many-fronts: bench-setup release
	$(BENCH) bench/many_fronts.py run

# The many-fronts simulation (docs/results/many-fronts-sim.md): the bounded
# sample's study (~3 min), then the frontier's (~15 min); huntlb-sim only, one
# process at a time (bench/many_fronts_sim.py says how to re-run single modes).
bench-many-fronts-sim: release
	$(BENCH) bench/many_fronts_sim.py --seeds 3 --requests 200000
	$(BENCH) bench/many_fronts_sim.py --frontier all --seeds 3 --requests 100000

# Seed 002 § VI (docs/wiki.md), a modelled Wikipedia day replayed against 8 real
# MediaWiki replicas (RR vs SR_4; both proxies' least-request vs the shipped
# fronts at 1 and 4 fronts), 3 paired repetitions: about 50 minutes (the
# 2000-page template about 2 more the first time, then cached in .cache/wiki/).
bench-wiki: bench-wiki-setup release
	$(BENCH) bench/wiki_replay.py run --reps 3

# Hunting vs the proxy's own least-request, 1 and 4 fronts, 5 paired repetitions
# (about 9 minutes; uses the last sweep's lambda0).
bench-vs-least: bench-setup release
	$(BENCH) bench/srlb.py --only vs-least --proxies envoy
	$(BENCH) bench/srlb.py --only vs-least --proxies haproxy

# The tier at 4 and 8 HAProxy fronts against leastconn and one front's ideal,
# on loopback, on the emulated cluster (docs/cluster.md) and there with 1% of
# the fleet's datagrams lost: 5 paired repetitions each, about 30 minutes; root.
# Then docs/results/cluster.md from the runs (bench/cluster_report.py).
CL := bench/data/cluster
bench-cluster: bench-setup release
	for n in 4 8; do \
	  $(BENCH) bench/pairs.py haproxy leastconn FWD/pass leastconn@1 --fronts $$n --reps 5 --json $(CL)/haproxy-$$n-loopback.jsonl && \
	  $(BENCH) bench/pairs.py haproxy leastconn FWD/pass leastconn@1 --fronts $$n --reps 5 --cluster --json $(CL)/haproxy-$$n-cluster.jsonl && \
	  $(BENCH) bench/pairs.py haproxy leastconn FWD/pass leastconn@1 --fronts $$n --reps 5 --cluster --fleet-loss 0.01 \
	    --json $(CL)/haproxy-$$n-loss.jsonl || exit 1; \
	done
	$(BENCH) bench/cluster_report.py --machine

# The tier under plain fronts (the chart's default) against each proxy's own
# least-request and one front's ideal, 4 fronts, on loopback, the emulated
# cluster and the real Kubernetes (bench/k8s_pairs.py: the chart installed
# twice, the runs from a pod), 5 paired repetitions each, shared seeds:
# about 45 minutes with the cluster built (test-k8s); root. Then
# docs/results/cluster.md (bench/cluster_report.py).
bench-k8s: bench-setup release setup-k8s
	./scripts/docker-setup.sh install
	for p in haproxy envoy; do b=$$(if [ $$p = haproxy ]; then echo leastconn; else echo LR/full; fi); \
	  $(BENCH) bench/pairs.py $$p $$b FWDp/plain $$b@1 --fronts 4 --reps 5 --json $(CL)/$$p-4-loopback-plain.jsonl && \
	  $(BENCH) bench/pairs.py $$p $$b FWDp/plain $$b@1 --fronts 4 --reps 5 --cluster --json $(CL)/$$p-4-cluster-plain.jsonl \
	  || exit 1; \
	done
	$(BENCH) bench/k8s_pairs.py haproxy envoy --reps 5 --json $(CL)/haproxy-4-k8s-plain.jsonl
	$(BENCH) bench/cluster_report.py

# What the agents cost beside 4 HAProxy, then 4 Envoy fronts, a plain HAProxy and
# Envoy beside each backend as the yardstick (~24 min); then docs/results/tier-cost.md from the
# runs (bench/tier_cost_report.py).
TC := bench/data/tier-cost
bench-tier-cost: bench-setup release
	$(BENCH) bench/pairs.py haproxy leastconn FWD/least FWDnone/least FWDp/plain leastconn+sc leastconn+esc \
	  --fronts 4 --reps 3 --idle 20 --json $(TC)/haproxy-4-fronts.jsonl > $(TC)/haproxy-4-fronts.txt
	cat $(TC)/haproxy-4-fronts.txt
	$(BENCH) bench/pairs.py envoy LR/full FWD/full FWDnone/full FWDp/plain LR/full+sc LR/full+esc \
	  --fronts 4 --reps 3 --idle 20 --json $(TC)/envoy-4-fronts.jsonl > $(TC)/envoy-4-fronts.txt
	cat $(TC)/envoy-4-fronts.txt
	# the kernel's own cost of a datagram, the floor under the tier's (five runs of 400,000)
	for b in 1 2 3 4 5; do target/release/huntlb-udpfloor --block $$b; done > $(TC)/udp-floor.jsonl
	$(BENCH) bench/tier_cost_report.py

bench-agent: setup release
	$(BENCH) bench/agent_overhead.py

# The emulated model server against its own model (docs/results/llm.md): ~1 min
bench-llm-emulator: setup release
	$(BENCH) bench/llm_emulator.py

# 1, 2 and 4 LLM gateways of each kind (Envoy's own least-request, an
# endpoint picker each, hunting tier fronts; HAProxy leastconn and tier fronts)
# over 8 emulated model servers, 6 paired repetitions (a repetition an
# invocation: 15 arms, about 12 minutes each), then the report.
# LLM_WORKLOAD: one of huntlb-llmload's workloads (sharegpt by default; the
# first one on a workload calibrates it, ~1-3 minutes more).
LLM_WORKLOAD ?= sharegpt
bench-llm-gateways: setup release
	for k in 0 1 2 3 4 5; do $(BENCH) bench/llm_gateways.py --workload $(LLM_WORKLOAD) --reps 1 --first-rep $$k || exit 1; done

# bench-llm-gateways on each workload shaped after
# inference-perf's (about 75-85 minutes each: 6 repetitions of 15 arms; the
# long-output one's longer requests take longest to drain), then each
# workload's SLO rate (--sweep: 5 loads, one run per arm and load, about
# 20-30 minutes each): about 7 hours in all. The sweeps as the report shows
# them: ShareGPT-like at 1, 2 and 4 gateways; shared prefixes over 40-s runs
# (a 20-s run is mostly its cold prefix caches' warm-up) with the
# prefix-affine agents; the others at 1 and 4 gateways.
LLM_WORKLOADS := sharegpt shared-prefix long-prompt long-output
LLM_SWEEP_sharegpt := --steps 0.7,0.85,1.0,1.1,1.2 --arms epp1,lr1,hunt1,lr2,hunt2,epp4,lr4,hunt4
LLM_SWEEP_shared-prefix := --seconds 40 --steps 0.7,0.85,0.95,1.05,1.15 --arms epp1,lr1,huntp1,lr4,huntp4
LLM_SWEEP_long-prompt := --steps 0.7,0.85,1.0,1.1,1.2 --arms epp1,lr1,hunt1,epp4,lr4,hunt4
LLM_SWEEP_long-output := --steps 0.7,0.85,1.0,1.1,1.2 --arms epp1,lr1,huntk1,epp4,lr4,huntk4
bench-llm: setup release
	for w in $(LLM_WORKLOADS); do $(MAKE) bench-llm-gateways LLM_WORKLOAD=$$w || exit 1; done
	$(foreach w,$(LLM_WORKLOADS),$(BENCH) bench/llm_gateways.py --workload $(w) --sweep $(LLM_SWEEP_$(w)) && ) true

# The endpoint pickers users run (GIE-style, one per gateway, with and
# without its prefix scorer) naming agents with fleet_pass_plain, at 1, 2 and
# 4 gateways, beside the pickers alone, least-request and hunting
# (docs/results/llm-pickers.md): 5 paired repetitions a workload of 20-s runs,
# a repetition an invocation (sharegpt 6 arms, about 3 minutes; shared-prefix
# 14, about 7), then 5 more of shared-prefix's prefix-scoring arms, whose p90
# swings with the workload's spells of overload (7 arms, about 3 minutes
# each); the load is bench-llm-gateways' calibration, read from its data.
PICKER_WORKLOADS := sharegpt shared-prefix
PICKER_PREFIX_MORE := epppa1,epppa2,epppa4,epppx1,epppx2,epppx4,lr1
bench-llm-pickers: setup release
	for w in $(PICKER_WORKLOADS); do for k in 0 1 2 3 4; do \
	  $(BENCH) bench/llm_pickers.py --workload $$w --reps 1 --first-rep $$k --seconds 20 || exit 1; done; done
	for k in 5 6 7 8 9; do \
	  $(BENCH) bench/llm_pickers.py --workload shared-prefix --arms $(PICKER_PREFIX_MORE) --reps 1 --first-rep $$k --seconds 20 || exit 1; done

# GIE's lightweight endpoint picker (cmd/lwepp: round robin over an
# InferencePool's pods, Envoy ext_proc), built from its released Go module
# into .cache/ (once; again only for another LWEPP_VERSION). Running it needs
# a Kubernetes API with the InferencePool CRD (docs/llm.md, "Under your
# endpoint picker").
LWEPP_VERSION ?= v1.6.0
LWEPP := .cache/lwepp/$(LWEPP_VERSION)/lwepp
lwepp: $(LWEPP)
$(LWEPP):
	mkdir -p $(dir $@)
	GOFLAGS= go mod download sigs.k8s.io/gateway-api-inference-extension@$(LWEPP_VERSION)
	# built in the module cache, not by `go install pkg@version`, which also
	# asks the proxy for the module's version list (its deprecation), refused here
	cd "$$(go env GOMODCACHE)/sigs.k8s.io/gateway-api-inference-extension@$(LWEPP_VERSION)" && \
	  GOWORK=off GOFLAGS=-mod=readonly nice -n 19 go build -o $(CURDIR)/$@.tmp ./cmd/lwepp && mv $(CURDIR)/$@.tmp $(CURDIR)/$@

bench-proxies: bench-setup release
	$(BENCH) bench/proxy_overhead.py
	$(MAKE) bench-front-scaling

# Each front over the same front with every hunting line removed, at 3, 12, 48
# and 128 servers, bare and browser-like requests: the plain fronts of
# fleet_pass_plain (20 paired repetitions, about 8 minutes a proxy), the tier
# fronts (30), the refusing fronts (20; HAProxy 2.6 and 3.0, and HAProxy's part by part), HAProxy's instructions per request (tier and plain fronts, ~10 min each)
# (about 70 minutes); then docs/results/front-scaling.md from its runs and template.
FS := bench/data/front-scaling
bench-front-scaling: bench-setup release
	$(BENCH) bench/front_scaling.py haproxy --fronts plainpass --reps 20 --json $(FS)/haproxy-plainpass-20-reps-calm.json
	$(BENCH) bench/front_scaling.py envoy --fronts plainpass --reps 20 --json $(FS)/envoy-plainpass-20-reps-calm.json
	$(BENCH) bench/front_scaling.py haproxy --fronts tier --reps 30 --json $(FS)/haproxy-2.6-tier-30-reps.json
	$(BENCH) bench/front_scaling.py envoy --fronts tier --reps 30 --json $(FS)/envoy-tier-30-reps.json
	$(BENCH) bench/front_scaling.py haproxy --fronts refusing --fill static --reps 20 --json $(FS)/haproxy-2.6-refusing-20-reps.json
	$(BENCH) bench/front_scaling.py haproxy --haproxy 3.0 --fronts refusing --fill static --reps 20 --json $(FS)/haproxy-3.0-refusing-20-reps.json
	$(BENCH) bench/refusing_ablation.py --servers 3,128 --reps 12 --json $(FS)/haproxy-2.6-refusing-ablation-12-reps.json
	$(BENCH) bench/front_scaling.py envoy --fronts refusing --reps 10 --json $(FS)/envoy-refusing-10-reps.json
	$(BENCH) bench/front_scaling.py haproxy --instructions 3000 --json $(FS)/haproxy-2.6-instructions.json
	$(BENCH) bench/front_scaling.py haproxy --fronts plainpass --instructions 3000 --json $(FS)/haproxy-2.6-plainpass-instructions.json
	$(BENCH) bench/front_scaling.py --page

# Faults under load, overload, and a 10-minute soak per proxy, through both
# fronts (about 35 minutes); each writes its section of docs/reliability.md.
# Exactly once at volume: 100000 unique POSTs through each front, with
# refusals, app errors and an app and an agent killed (docs/reliability.md,
# "Exactly once at volume").
bench-exactly-once: bench-setup release
	$(BENCH) bench/reliability.py exactly-once

bench-reliability: bench-setup release
	$(BENCH) bench/reliability.py faults
	$(BENCH) bench/reliability.py overload
	$(BENCH) bench/reliability.py soak --minutes 10

# libFuzzer runs of the cargo-fuzz targets in fuzz/ (docs/fuzzing.md), one at
# a time at the lowest priority, FUZZ_SECONDS each; new inputs land in
# fuzz/corpus/<target>/ (shrink with `cargo +nightly fuzz cmin <target>` before
# committing). Needs nightly Rust and `cargo install cargo-fuzz`; never part of
# `make test`, which replays the committed corpora on stable
# (policy/tests/fuzz_replay.rs; agent_headers: agent/tests/fuzz_replay.rs). No
# sanitizer: the code the targets reach has no unsafe (the agent's unsafe blocks,
# in fleet/read.rs and load/scoreboard.rs's read-only mapping, are not reached by
# agent_headers).
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= spec settings policy_fsm headers fleet_report agent_headers
fuzz:
	cd fuzz && for t in $(FUZZ_TARGETS); do \
		nice -n 19 $(CARGO) +nightly fuzz run -s none $$t -- \
			-max_total_time=$(FUZZ_SECONDS) -dict=$(CURDIR)/fuzz/hunt.dict -print_final_stats=1 || exit 1; \
	done

clean:
	$(CARGO) clean
