# Stepstone's entry points. `make demo` runs the order saga end to end;
# `make demo-cluster` runs three hosts on one S3 bucket and kills one;
# `make test` builds everything and runs every test; `make fuzz` runs the
# fuzz targets (see mk/fuzz.mk); `make bench-peers` runs Stepstone beside
# Restate, Obelisk and DBOS (see mk/peers.mk). All install the guest toolchain when it is
# missing (see mk/guests.mk).

CARGO ?= cargo
STEPSTONE := target/debug/stepstone
DEMO_DATA := target/demo-data
DEMO_ORDER := {"order_id":"o-1001","item":"book","amount_cents":1200,"sleep_ms":1500}

.PHONY: all host demo demo-cluster test reliability bench clean check-host-toolchain browser sim structure embedder-api

all: host guests

check-host-toolchain:
	@command -v $(CARGO) >/dev/null || { \
		echo "make: cargo not found: install Rust (https://rustup.rs), version 1.95 or newer" >&2; exit 1; }

# One profile (dev, with dependencies optimised) serves the host, the demo
# and the tests, so nothing is compiled twice. The binary needs the
# library's internals (as the tests do: one feature set for both).
host: check-host-toolchain
	$(CARGO) build -p stepstone --features internals

$(STEPSTONE): host

include mk/guests.mk
include mk/fuzz.mk
include mk/schemathesis.mk
include mk/seaweedfs.mk
include mk/s3rver.mk
include mk/peers.mk

# Only the order saga's guest: a newcomer's first command builds no other
# language's toolchain (`make guests` builds them all).
demo: host $(GUESTS_DIR)/order.wasm
	@rm -rf $(DEMO_DATA)
	@echo "== the order saga: reserve, charge (fails once, retried), sleep, await approval, ship"
	@( for try in $$(seq 60); do sleep 0.5; \
		STEPSTONE_DATA=$(DEMO_DATA) $(STEPSTONE) signal demo-order approve '{"approved":true}' 2>/dev/null \
		&& echo "== (another shell) sent the approval signal" >&2 && break; done ) &
	STEPSTONE_DATA=$(DEMO_DATA) $(STEPSTONE) run target/guests/order.wasm place-order \
		--run-id demo-order --input '$(DEMO_ORDER)'
	@echo "== its journal"
	@STEPSTONE_DATA=$(DEMO_DATA) $(STEPSTONE) history demo-order
	@echo "== replayed against that journal"
	@STEPSTONE_DATA=$(DEMO_DATA) $(STEPSTONE) replay demo-order

# Three hosts on one S3 bucket (SeaweedFS on loopback), a load of runs, one
# host killed mid-load: every run finishes (mk/demo-cluster.py).
demo-cluster: host guests seaweedfs
	python3 mk/demo-cluster.py $(STEPSTONE) $(WEED) target/guests target/demo-cluster

# The reliability suites file their results in target/reliability/ as they
# pass (`make fuzz` in target/fuzz-results/); docs/RELIABILITY.md is rebuilt
# from this run's results and the last fuzz run's.
RELIABILITY_RESULTS := target/reliability
FUZZ_RESULTS := target/fuzz-results
SIM_RESULTS := target/sim-results

# The console's end-to-end tests (tests/console.rs) drive Debian's headless
# Chromium through its WebDriver.
browser:
	$(call apt-install-missing,Chromium and its WebDriver for the console's tests,/usr/bin/chromium /usr/bin/chromedriver,chromium chromium-driver,)

# The simulation of many hosts (sim/): `make sim SEEDS=N` plays N seeds
# from SIM_FROM and files its figures in target/sim-results/ (two halves
# run at once use both cores: SIM_FROM=0 and SIM_FROM=N); `make test`
# plays as many as SIM_BUDGET allows.
SEEDS ?= 10000
SIM_FROM ?= 0
SIM_BUDGET ?= 4m
SIM := $(CARGO) run --quiet -p stepstone-sim --

test: host guests guest-sdk-test schemathesis seaweedfs s3rver browser embedder-api
	@rm -rf $(RELIABILITY_RESULTS)
	@python3 mk/structure.py > /dev/null
	$(CARGO) test --workspace
	$(SIM) --seeds 1000000 --budget $(SIM_BUDGET) --record $(RELIABILITY_RESULTS)/sim.json
	@$(MAKE) --no-print-directory reliability

# The library as an embedder builds it, without the internals: no warning,
# every public item documented (lib.rs denies missing docs), and every type
# an embedder meets nameable where it is met.
embedder-api: check-host-toolchain
	$(CARGO) rustc --quiet -p stepstone --lib -- -D warnings -D unnameable_types

sim: host guests
	$(SIM) --seeds $(SEEDS) --from $(SIM_FROM) --record $(SIM_RESULTS)/sim-$(SIM_FROM)-$(SEEDS).json

reliability:
	python3 tests/reliability_report.py docs/RELIABILITY.md $(RELIABILITY_RESULTS) $(FUZZ_RESULTS) $(SIM_RESULTS)

# The benchmarks (bench/) write docs/BENCHMARKS.md. By default they reuse
# the dev profile's dependencies, already optimised (opt-level 3) for the
# tests, and compile only Stepstone's own crates optimised and without debug
# assertions: no second build of wasmtime. BENCH_PROFILE=release measures a
# full release build instead (compiles every dependency again).
BENCH_PROFILE ?= dev-optimised
BENCH_OWN_CRATES := stepstone stepstone-bench
BENCH_CARGO_FLAGS_dev-optimised := --profile dev $(foreach crate,$(BENCH_OWN_CRATES), \
	--config 'profile.dev.package.$(crate).opt-level=3' \
	--config 'profile.dev.package.$(crate).debug-assertions=false' \
	--config 'profile.dev.package.$(crate).overflow-checks=false')
BENCH_CARGO_FLAGS_release := --profile bench

# BENCH_ONLY="replay journal" runs only the benchmarks so named, into
# target/BENCHMARKS-partial.md.
bench: guests
	STEPSTONE_BENCH_PROFILE="$(BENCH_PROFILE)" $(CARGO) bench -p stepstone-bench \
		$(BENCH_CARGO_FLAGS_$(BENCH_PROFILE)) -- $(BENCH_ONLY)

# The measures the runtime's layout is judged by (mk/structure.py): run
# before and after a restructuring.
structure:
	$(CARGO) doc --quiet -p stepstone --no-deps
	python3 mk/structure.py

clean:
	$(CARGO) clean
