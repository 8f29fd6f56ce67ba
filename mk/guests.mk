# The guests: `make guests` builds every example under examples-guests/
# (those in Python, JavaScript and C by mk/polyglot.mk) and the hostile-guest
# corpus under tests/hostile-guests/ into components in target/guests/.
#
# Included by the top-level Makefile and run from the repository root. Set
# STEPSTONE (the host binary, whose `componentize` subcommand turns a core
# module into a component) before including this file: prerequisites are
# read when the rules are.

STEPSTONE ?= target/debug/stepstone

GUEST_TARGET := wasm32-unknown-unknown
GUESTS_DIR := target/guests
GUEST_MANIFEST := examples-guests/Cargo.toml
HOSTILE_DIR := tests/hostile-guests
HOSTILE_MANIFEST := $(HOSTILE_DIR)/Cargo.toml
# Two cargo target dirs, so building the order example's variants (`order
# --features reordered`, ...) does not evict the normal build's artifacts
# (and the other way round).
GUEST_BUILD_DIR := target/guest-build
GUEST_VARIANT_BUILD_DIR := target/guest-build-variants
GUEST_CORE_DIR := $(GUEST_BUILD_DIR)/$(GUEST_TARGET)/release
# The order saga's variants, one per cargo feature (examples-guests/order's
# Cargo.toml says what each changes), built into order-VARIANT.wasm.
ORDER_VARIANTS := reordered fraud-check patched

EXAMPLE_GUESTS := hello order checkout fanout batch wasi_probe polyglot bench counter
HOSTILE_GUESTS := hostile forbidden blocker stalled fetcher
RUST_GUESTS := $(EXAMPLE_GUESTS) $(HOSTILE_GUESTS)
EXAMPLE_GUEST_CORES := $(EXAMPLE_GUESTS:%=$(GUEST_CORE_DIR)/%.wasm)
HOSTILE_GUEST_CORES := $(HOSTILE_GUESTS:%=$(GUEST_CORE_DIR)/%.wasm)
ORDER_VARIANT_CORES := $(ORDER_VARIANTS:%=$(GUEST_VARIANT_BUILD_DIR)/order-%.wasm)
GUEST_COMPONENTS := $(RUST_GUESTS:%=$(GUESTS_DIR)/%.wasm) \
	$(ORDER_VARIANTS:%=$(GUESTS_DIR)/order-%.wasm) $(GUESTS_DIR)/wat-step.wasm $(GUESTS_DIR)/bombs.wasm \
	$(GUESTS_DIR)/wat-workflow.wasm

# Everything a Rust guest's core module is built from.
GUEST_SOURCES := $(shell find guest-sdk/Cargo.toml guest-sdk/src examples-guests $(HOSTILE_DIR) wit \
	-name target -prune -o \
	-type f \( -name '*.rs' -o -name '*.toml' -o -name '*.lock' -o -name '*.wit' \) -print)

# The toolchain: a rustup toolchain that has the wasm32 target, where there is
# one (a developer's laptop); otherwise Debian's Rust, which ships std's
# source but no wasm32 std, so cargo builds std for the target on the fly.
ifneq ($(filter $(GUEST_TARGET),$(shell rustup target list --installed 2>/dev/null)),)
GUEST_CARGO := cargo
GUEST_CARGO_FLAGS :=
GUEST_TOOLCHAIN_FILES :=
else
GUEST_CARGO := RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 \
	CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=/usr/bin/wasm-ld-19 /usr/bin/cargo
GUEST_CARGO_FLAGS := -Zbuild-std=std,panic_abort
GUEST_TOOLCHAIN_FILES := /usr/bin/rustc /usr/bin/cargo /usr/bin/wasm-ld-19 \
	/usr/lib/rustlib/src/rust/library/std/Cargo.toml
endif
GUEST_APT_PACKAGES := rustc-web cargo-web rust-web-src lld-19

# $(call guest-cargo-build,MANIFEST,TARGET_DIR,CARGO_ARGS): builds guest core
# modules in release mode for wasm32.
guest-cargo-build = $(GUEST_CARGO) build --release $(GUEST_CARGO_FLAGS) \
	--target $(GUEST_TARGET) --manifest-path $(1) --target-dir $(2) $(3)

.PHONY: guests guest-toolchain guest-sdk-test

include mk/polyglot.mk

guests: $(GUEST_COMPONENTS) $(POLYGLOT_COMPONENTS)

# $(call apt-install-missing,WHAT,FILES,PACKAGES,OTHER_FIX): when any of
# FILES is missing, installs Debian's PACKAGES with apt-get when running as
# root; otherwise stops and says what to install (OTHER_FIX: another way out,
# or nothing).
apt-install-missing = @missing=; for file in $(2); do \
		[ -e "$$file" ] || missing="$$missing $$file"; \
	done; \
	[ -z "$$missing" ] && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "make: installing $(1) (missing:$$missing)"; \
		apt-get update && apt-get install -y $(3); \
	else \
		echo "make: $(1) is not installed (missing:$$missing)." >&2; \
		echo "make: run $(4)'apt-get install -y $(3)' as root." >&2; \
		exit 1; \
	fi

GUEST_TOOLCHAIN_OTHER_FIX := 'rustup target add $(GUEST_TARGET)', or

guest-toolchain:
	$(call apt-install-missing,the Rust toolchain for $(GUEST_TARGET),$(GUEST_TOOLCHAIN_FILES),$(GUEST_APT_PACKAGES),$(GUEST_TOOLCHAIN_OTHER_FIX) )

# One cargo run builds every member of a workspace. Cargo leaves an
# up-to-date artifact untouched, so touch the outputs to tell make they are
# current. Both workspaces share one target dir, so std is built once.
$(EXAMPLE_GUEST_CORES) &: $(GUEST_SOURCES) | guest-toolchain
	$(call guest-cargo-build,$(GUEST_MANIFEST),$(GUEST_BUILD_DIR),--workspace)
	@touch $(EXAMPLE_GUEST_CORES)

$(HOSTILE_GUEST_CORES) &: $(GUEST_SOURCES) | guest-toolchain
	$(call guest-cargo-build,$(HOSTILE_MANIFEST),$(GUEST_BUILD_DIR),--workspace)
	@touch $(HOSTILE_GUEST_CORES)

# The variants share a target dir, so each build overwrites the last one's
# order.wasm: copy each out before building the next.
$(ORDER_VARIANT_CORES) &: $(GUEST_SOURCES) | guest-toolchain
	@for variant in $(ORDER_VARIANTS); do \
		echo "guests: order --features $$variant"; \
		$(call guest-cargo-build,$(GUEST_MANIFEST),$(GUEST_VARIANT_BUILD_DIR),--package order --features $$variant) \
			&& cp $(GUEST_VARIANT_BUILD_DIR)/$(GUEST_TARGET)/release/order.wasm \
				$(GUEST_VARIANT_BUILD_DIR)/order-$$variant.wasm \
			|| exit 1; \
	done

# wit-bindgen embedded the component type in each Rust core module, so
# componentize needs no world for them.
$(RUST_GUESTS:%=$(GUESTS_DIR)/%.wasm): $(GUESTS_DIR)/%.wasm: $(GUEST_CORE_DIR)/%.wasm $(STEPSTONE)
	@mkdir -p $(@D)
	$(STEPSTONE) componentize $< -o $@

$(ORDER_VARIANTS:%=$(GUESTS_DIR)/order-%.wasm): $(GUESTS_DIR)/%.wasm: $(GUEST_VARIANT_BUILD_DIR)/%.wasm $(STEPSTONE)
	@mkdir -p $(@D)
	$(STEPSTONE) componentize $< -o $@

$(GUESTS_DIR)/wat-step.wasm: examples-guests/wat-step/step.wat $(STEPSTONE)
	@mkdir -p $(@D)
	$(STEPSTONE) componentize $< --world steps -o $@

$(GUESTS_DIR)/bombs.wasm: $(HOSTILE_DIR)/bombs.wat $(STEPSTONE)
	@mkdir -p $(@D)
	$(STEPSTONE) componentize $< --world workflows-and-steps -o $@

$(GUESTS_DIR)/wat-workflow.wasm: examples-guests/wat-workflow/workflow.wat $(STEPSTONE)
	@mkdir -p $(@D)
	$(STEPSTONE) componentize $< --world workflows -o $@

# The SDK's unit tests run natively, with the host's toolchain.
guest-sdk-test:
	cargo test --manifest-path guest-sdk/Cargo.toml
