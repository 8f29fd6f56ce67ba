# `make bench-peers`: Stepstone beside Restate, Obelisk and DBOS (on SQLite
# and on PostgreSQL) on this machine, in
# the same run (bench/peers/run.py), writing the peer table into
# docs/BENCHMARKS.md. The peers install under target/tools/peers/ at pinned
# versions, never system-wide (but for PostgreSQL, Debian's package, which
# DBOS's second column runs on): Restate's server and TypeScript SDK by
# `npm ci` from bench/peers/restate's lockfile (integrity hashes; install
# scripts off, so nothing runs at install), Obelisk built from its crates.io
# source by `cargo install --locked` (its own lockfile; it needs Debian's
# protoc), DBOS and its dependencies by pip
# from bench/peers/dbos-requirements.txt (hash-checked). Obelisk runs the
# bench's shapes as a WIT activity and workflow (bench/peers/obelisk), built
# for wasm32 as the example guests are. Stepstone runs the
# `stepstone` binary built as `make bench` builds its crates (optimised,
# without debug assertions), copied aside so `make host` gets its own back.
# Included by the Makefile, after mk/guests.mk (TOOLS_DIR) and
# mk/seaweedfs.mk (WEED).

PEERS_TOOLS := $(TOOLS_DIR)/peers
RESTATE_SERVER := $(PEERS_TOOLS)/restate/node_modules/.bin/restate-server
DBOS_VENV := $(PEERS_TOOLS)/dbos
DBOS := $(DBOS_VENV)/bin/dbos
DBOS_REQUIREMENTS := bench/peers/dbos-requirements.txt
OBELISK_VERSION := 0.38.3
OBELISK := $(PEERS_TOOLS)/obelisk-$(OBELISK_VERSION)/bin/obelisk
OBELISK_MANIFEST := bench/peers/obelisk/Cargo.toml
OBELISK_SOURCES := $(shell find bench/peers/obelisk -name target -prune -o -type f -print)
OBELISK_ROLES := activity workflow
OBELISK_CORES := $(OBELISK_ROLES:%=$(GUEST_CORE_DIR)/obelisk_bench_%.wasm)
OBELISK_COMPONENTS := $(OBELISK_ROLES:%=$(GUESTS_DIR)/obelisk-bench-%.wasm)
PEERS_STEPSTONE := target/bench-peers/stepstone
BENCH_BIN_DIR_dev-optimised := target/debug
BENCH_BIN_DIR_release := target/release

.PHONY: bench-peers peer-tools peer-postgres

peer-tools: $(RESTATE_SERVER) $(OBELISK) $(OBELISK_COMPONENTS) $(DBOS) peer-postgres

# DBOS's production store, Debian's PostgreSQL: the benchmark starts its own
# cluster on loopback (bench/peers/run.py).
peer-postgres:
	@test -n "$(wildcard /usr/lib/postgresql/*/bin/initdb)" \
		|| { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get install -y postgresql; } \
		|| { echo "bench-peers: PostgreSQL is missing: apt-get install -y postgresql" >&2; exit 1; }

$(RESTATE_SERVER): bench/peers/restate/package.json bench/peers/restate/package-lock.json
	@command -v npm >/dev/null || { echo "bench-peers: npm is missing: apt-get install -y nodejs npm" >&2; exit 1; }
	@mkdir -p $(PEERS_TOOLS)/restate
	cp $^ $(PEERS_TOOLS)/restate/
	cd $(PEERS_TOOLS)/restate && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@

$(OBELISK):
	$(call apt-install-missing,protoc (Obelisk's build needs it),/usr/bin/protoc,protobuf-compiler,)
	cargo install obelisk --version $(OBELISK_VERSION) --locked --root $(PEERS_TOOLS)/obelisk-$(OBELISK_VERSION)

$(OBELISK_CORES) &: $(OBELISK_SOURCES) | guest-toolchain
	$(call guest-cargo-build,$(OBELISK_MANIFEST),$(GUEST_BUILD_DIR),--workspace)
	@touch $(OBELISK_CORES)

$(OBELISK_COMPONENTS): $(GUESTS_DIR)/obelisk-bench-%.wasm: $(GUEST_CORE_DIR)/obelisk_bench_%.wasm $(STEPSTONE)
	@mkdir -p $(@D)
	$(STEPSTONE) componentize $< -o $@

$(DBOS): $(DBOS_REQUIREMENTS)
	$(call python-tool,$(DBOS_VENV),--require-hashes -r $(DBOS_REQUIREMENTS))
	@touch $@

# `make bench-peers SCALING=1`: Stepstone and Restate with their servers
# pinned to 1, 2, 4, ... cores and the client to cores of its own (needs 4
# or more); prints a table, writes nothing.
bench-peers: peer-tools seaweedfs $(GUESTS_DIR)/bench.wasm
	$(CARGO) build -p stepstone --features internals $(BENCH_CARGO_FLAGS_$(BENCH_PROFILE))
	@mkdir -p $(dir $(PEERS_STEPSTONE))
	cp $(BENCH_BIN_DIR_$(BENCH_PROFILE))/stepstone $(PEERS_STEPSTONE)
	$(CARGO) build -p stepstone --features internals
	python3 bench/peers/run.py --stepstone $(PEERS_STEPSTONE) --weed $(WEED) --obelisk $(OBELISK) --tools $(PEERS_TOOLS) \
		--guests $(GUESTS_DIR) --docs docs/BENCHMARKS.md $(if $(PEERS_ONLY),--only $(PEERS_ONLY)) \
		$(if $(SCALING),--scaling)
