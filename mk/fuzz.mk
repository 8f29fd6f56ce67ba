# The fuzz targets: `make fuzz` runs each one for FUZZ_SECONDS with
# cargo-fuzz (installed here when missing), one at a time, and files each
# result under target/fuzz-results/ for the reliability report. Their saved
# regression inputs (fuzz/regressions/) replay in `make test` through
# host/tests/fuzz_regressions.rs, which needs no cargo-fuzz.
#
# Included by the top-level Makefile and run from the repository root.

FUZZ_SECONDS ?= 120
# Cheapest first: a crash in the journal decoder shows within seconds.
FUZZ_TARGETS := journal_decode api_json component_upload
CARGO_FUZZ_VERSION := 0.13.1

.PHONY: fuzz fuzz-build check-cargo-fuzz

check-cargo-fuzz: check-host-toolchain
	@$(CARGO) fuzz --version 2>/dev/null | grep -q ' $(CARGO_FUZZ_VERSION)$$' || { \
		echo "make: installing cargo-fuzz $(CARGO_FUZZ_VERSION)" >&2; \
		$(CARGO) install cargo-fuzz --locked --version $(CARGO_FUZZ_VERSION); }

# cargo-fuzz passes nightly-only flags to rustc: RUSTC_BOOTSTRAP lets the
# stable toolchain take them. No sanitizer: the host is safe Rust, and ASan
# would slow wasmtime's compiler (which uploads run) several times over.
fuzz-build: check-cargo-fuzz
	RUSTC_BOOTSTRAP=1 $(CARGO) fuzz build --sanitizer none

fuzz: guests fuzz-build
	@for target in $(FUZZ_TARGETS); do \
		CARGO="$(CARGO)" mk/fuzz-target.sh $$target $(FUZZ_SECONDS) || exit 1; \
	done
