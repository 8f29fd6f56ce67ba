# schemathesis (PyPI), the third-party client tests/api_contract.rs runs
# against the served /v1/openapi.json: installed by `make test` into a venv
# of its own under target/tools/, never system-wide, with every package
# pinned by mk/schemathesis-requirements.txt (schemathesis 4.32.5).
# Included by the Makefile, after mk/guests.mk (which sets TOOLS_DIR).

SCHEMATHESIS_VENV := $(TOOLS_DIR)/schemathesis
SCHEMATHESIS := $(SCHEMATHESIS_VENV)/bin/schemathesis
SCHEMATHESIS_REQUIREMENTS := mk/schemathesis-requirements.txt

.PHONY: schemathesis

schemathesis: $(SCHEMATHESIS)

$(SCHEMATHESIS): $(SCHEMATHESIS_REQUIREMENTS)
	$(call python-tool,$(SCHEMATHESIS_VENV),-r $(SCHEMATHESIS_REQUIREMENTS))
	@touch $@
