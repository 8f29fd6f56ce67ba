# Guests in Python, JavaScript and C: `make guests` builds each into a
# component in target/guests/, installing the pinned tools it needs under
# target/tools/ (never system-wide, except Debian's clang and wasi-libc, which
# apt-get installs when running as root). Included by mk/guests.mk.
#
# Python and JavaScript components import WASI 0.2 (their runtimes need it);
# the host gives workflows a deterministic WASI and steps WASI by policy.
# The C guests import nothing but the contract.

TOOLS_DIR := target/tools
WIT_FILES := $(wildcard wit/*.wit)

# $(call python-tool,VENV,PIP_ARGS): a venv at VENV with PIP_ARGS installed
# in it, for a Python tool the build or the tests run.
python-tool = @command -v python3 >/dev/null || { \
		echo "tools: python3 is missing: apt-get install -y python3 python3-venv" >&2; exit 1; }; \
	python3 -m venv $(1) && $(1)/bin/pip install --quiet --disable-pip-version-check $(2)

# componentize-py 0.25.1 emits WASI 0.2 components that wasmtime 48 runs.
COMPONENTIZE_PY_VERSION := 0.25.1
PY_VENV := $(TOOLS_DIR)/py
COMPONENTIZE_PY := $(PY_VENV)/bin/componentize-py
PY_SDK := guest-sdk/python

# componentize-js is pinned with its dependencies by guest-sdk/js/package-lock.json.
JS_TOOLS := $(TOOLS_DIR)/js
COMPONENTIZE_JS := $(JS_TOOLS)/node_modules/.bin/componentize-js
JS_SDK_SOURCES := $(wildcard guest-sdk/js/*.js)

# wit-bindgen's C generator, the same release as the Rust SDK's wit-bindgen.
# Built without the other generators and unoptimised: it runs once on a
# small WIT, and this takes 1.4 min of CPU instead of 5.6 (same output).
WIT_BINDGEN_VERSION := 0.60.0
WIT_BINDGEN := $(TOOLS_DIR)/bin/wit-bindgen
C_TOOLCHAIN_FILES := /usr/bin/clang-19 /usr/lib/wasm32-wasi/libc.a \
	/usr/lib/llvm-19/lib/clang/19/lib/wasi/libclang_rt.builtins-wasm32.a
C_APT_PACKAGES := clang-19 lld-19 wasi-libc libclang-rt-19-dev-wasm32
C_SDK := guest-sdk/c
# wasi-libc gives malloc and string functions; nothing here calls the parts
# that import WASI, so the module imports only the contract (componentize
# fails loudly if one ever does).
C_FLAGS := --target=wasm32-wasi -O2 -mexec-model=reactor -nostartfiles -Wl,--no-entry -Wl,--strip-all \
	-Wall -Wextra -Werror

POLYGLOT_COMPONENTS := $(GUESTS_DIR)/py-steps.wasm $(GUESTS_DIR)/py-workflow.wasm \
	$(GUESTS_DIR)/js-steps.wasm $(GUESTS_DIR)/js-workflow.wasm \
	$(GUESTS_DIR)/c-steps.wasm $(GUESTS_DIR)/c-workflow.wasm

.PHONY: polyglot-guests c-toolchain

polyglot-guests: $(POLYGLOT_COMPONENTS)

$(COMPONENTIZE_PY):
	$(call python-tool,$(PY_VENV),componentize-py==$(COMPONENTIZE_PY_VERSION))

$(COMPONENTIZE_JS): guest-sdk/js/package.json guest-sdk/js/package-lock.json
	@command -v npm >/dev/null || { echo "guests: npm is missing: apt-get install -y nodejs npm" >&2; exit 1; }
	@mkdir -p $(JS_TOOLS)
	cp guest-sdk/js/package.json guest-sdk/js/package-lock.json $(JS_TOOLS)/
	cd $(JS_TOOLS) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(WIT_BINDGEN):
	cargo install --locked --quiet --debug --no-default-features --features c \
		--version $(WIT_BINDGEN_VERSION) --root $(TOOLS_DIR) wit-bindgen-cli

c-toolchain:
	$(call apt-install-missing,clang for wasm32,$(C_TOOLCHAIN_FILES),$(C_APT_PACKAGES),)

# $(call componentize-py,WORLD,APP_DIR,OUT)
componentize-py = $(COMPONENTIZE_PY) -d wit -w $(1) componentize -p $(PY_SDK) -p $(2) app -o $(3)

$(GUESTS_DIR)/py-steps.wasm: examples-guests/py-steps/app.py $(PY_SDK)/stepstone.py $(WIT_FILES) | $(COMPONENTIZE_PY)
	@mkdir -p $(@D)
	$(call componentize-py,steps,examples-guests/py-steps,$@)

$(GUESTS_DIR)/py-workflow.wasm: examples-guests/py-workflow/app.py $(PY_SDK)/stepstone.py $(WIT_FILES) | $(COMPONENTIZE_PY)
	@mkdir -p $(@D)
	$(call componentize-py,workflows,examples-guests/py-workflow,$@)

# componentize-js resolves the app's relative imports (of guest-sdk/js)
# inside the current directory, so it runs from the repository root. Its
# `fetch-event` feature exports wasi:http's incoming handler, which no world
# has, so it is always left out. Its `http` feature (`fetch`, over
# wasi:http/outgoing-handler) is kept in a component that exports steps:
# the `steps` world imports wasi:http, and the host lets a step reach the
# origins its tenant's allowlist names. It is left out of a component of
# the `workflows` world, which does not import it: workflows never reach
# the network.
componentize-js-disabled = $(if $(filter workflows,$(1)),http fetch-event,fetch-event)
componentize-js = $(COMPONENTIZE_JS) --wit wit --world-name $(1) --disable $(componentize-js-disabled) -o $(3) $(2)

$(GUESTS_DIR)/js-steps.wasm: examples-guests/js-steps/app.js $(JS_SDK_SOURCES) $(WIT_FILES) | $(COMPONENTIZE_JS)
	@mkdir -p $(@D)
	$(call componentize-js,steps,$<,$@)

$(GUESTS_DIR)/js-workflow.wasm: examples-guests/js-workflow/app.js $(JS_SDK_SOURCES) $(WIT_FILES) | $(COMPONENTIZE_JS)
	@mkdir -p $(@D)
	$(call componentize-js,workflows,$<,$@)

# The C guests: bindings generated from the WIT for the guest's world,
# compiled with the SDK's helper for that world, then made a component by
# the host (wit-bindgen embedded the component type in WORLD_component_type.o).
# The worlds' bindings share one directory: their file names differ.
C_BINDINGS_DIR := target/c-bindings
C_BUILD_DIR := target/c-build
C_SDK_SHARED := $(C_SDK)/stepstone_guest.c $(C_SDK)/stepstone_guest.h

$(C_BINDINGS_DIR)/%.c $(C_BINDINGS_DIR)/%.h $(C_BINDINGS_DIR)/%_component_type.o: $(WIT_FILES) | $(WIT_BINDGEN)
	$(WIT_BINDGEN) c wit --world $* --out-dir $(C_BINDINGS_DIR)
	@touch $(C_BINDINGS_DIR)/$*.c $(C_BINDINGS_DIR)/$*.h $(C_BINDINGS_DIR)/$*_component_type.o

# $(call c-guest,GUEST,WORLD): the core module of examples-guests/GUEST,
# built for WORLD with guest-sdk/c/stepstone_WORLD.c.
define c-guest
$(C_BUILD_DIR)/$(1).wasm: $(wildcard examples-guests/$(1)/*.c) $(C_SDK)/stepstone_$(2).c $(C_SDK)/stepstone_$(2).h \
		$(C_SDK_SHARED) $(C_BINDINGS_DIR)/$(2).c $(C_BINDINGS_DIR)/$(2).h $(C_BINDINGS_DIR)/$(2)_component_type.o \
		| c-toolchain
	@mkdir -p $$(@D)
	clang-19 $(C_FLAGS) -I $(C_BINDINGS_DIR) -I $(C_SDK) -o $$@ $$(filter %.c %.o,$$^)
endef
$(eval $(call c-guest,c-steps,steps))
$(eval $(call c-guest,c-workflow,workflows))

$(GUESTS_DIR)/c-%.wasm: $(C_BUILD_DIR)/c-%.wasm $(STEPSTONE)
	@mkdir -p $(@D)
	$(STEPSTONE) componentize $< -o $@
