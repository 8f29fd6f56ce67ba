# `make bench-peers`: Stepstone beside Restate and DBOS (on SQLite and on
# PostgreSQL) on this machine, in
# the same run (bench/peers/run.py), writing the peer table into
# docs/BENCHMARKS.md. The peers install under target/tools/peers/ at pinned
# versions, never system-wide (but for PostgreSQL, Debian's package, which
# DBOS's second column runs on): Restate's server and TypeScript SDK by
# `npm ci` from bench/peers/restate's lockfile (integrity hashes; install
# scripts off, so nothing runs at install), DBOS and its dependencies by pip
# from bench/peers/dbos-requirements.txt (hash-checked). Stepstone runs the
# `stepstone` binary built as `make bench` builds its crates (optimised,
# without debug assertions), copied aside so `make host` gets its own back.
# Included by the Makefile, after mk/guests.mk (TOOLS_DIR) and
# mk/seaweedfs.mk (WEED).

PEERS_TOOLS := $(TOOLS_DIR)/peers
RESTATE_SERVER := $(PEERS_TOOLS)/restate/node_modules/.bin/restate-server
DBOS_VENV := $(PEERS_TOOLS)/dbos
DBOS := $(DBOS_VENV)/bin/dbos
DBOS_REQUIREMENTS := bench/peers/dbos-requirements.txt
PEERS_STEPSTONE := target/bench-peers/stepstone
BENCH_BIN_DIR_dev-optimised := target/debug
BENCH_BIN_DIR_release := target/release

.PHONY: bench-peers peer-tools peer-postgres

peer-tools: $(RESTATE_SERVER) $(DBOS) peer-postgres

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
	python3 bench/peers/run.py --stepstone $(PEERS_STEPSTONE) --weed $(WEED) --tools $(PEERS_TOOLS) \
		--guests $(GUESTS_DIR) --docs docs/BENCHMARKS.md $(if $(PEERS_ONLY),--only $(PEERS_ONLY)) \
		$(if $(SCALING),--scaling)
