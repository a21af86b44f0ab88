# huntlb: the two commands a newcomer needs are `make demo` and `make test`.
WASM := target/huntlb_filter.wasm

.PHONY: setup build wasm test test-rust test-lua test-integration demo bench-agent bench-proxies clean

CARGO ?= cargo
PYTEST ?= python3 -m pytest

setup:
	./scripts/setup.sh

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

test-integration: build
	$(PYTEST) -q tests

demo: setup build
	python3 scripts/demo.py

# Benchmarks are never part of `make test`.
bench-agent: setup wasm
	$(CARGO) build --release -p huntlb-agent -p huntlb-bench
	HUNTLB_PROFILE=release python3 bench/agent_overhead.py

bench-proxies: setup wasm
	$(CARGO) build --release -p huntlb-agent -p huntlb-bench
	HUNTLB_PROFILE=release python3 bench/proxy_overhead.py

clean:
	$(CARGO) clean
