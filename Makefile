# Stepstone's entry points. `make demo` runs the order saga end to end;
# `make test` builds everything and runs every test; `make fuzz` runs the
# fuzz targets (see mk/fuzz.mk). All install the guest toolchain when it is
# missing (see mk/guests.mk).

CARGO ?= cargo
STEPSTONE := target/debug/stepstone
DEMO_DATA := target/demo-data
DEMO_ORDER := {"order_id":"o-1001","item":"book","amount_cents":1200,"sleep_ms":1500}

.PHONY: all host demo test bench clean check-host-toolchain

all: host guests

check-host-toolchain:
	@command -v $(CARGO) >/dev/null || { \
		echo "make: cargo not found: install Rust (https://rustup.rs), version 1.95 or newer" >&2; exit 1; }

# One profile (dev, with dependencies optimised) serves the host, the demo
# and the tests, so nothing is compiled twice.
host: check-host-toolchain
	$(CARGO) build -p stepstone

$(STEPSTONE): host

include mk/guests.mk
include mk/fuzz.mk

demo: host guests
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

test: host guests guest-sdk-test
	$(CARGO) test --workspace

bench:
	@echo "make bench: the benchmark suite is not written yet (its own issue)" >&2; exit 1

clean:
	$(CARGO) clean
