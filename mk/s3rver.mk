# s3rver (npm), an S3 server that ignores `If-None-Match: *`: the tests
# (tests/bad_input.rs) show that a host refuses to run on a store whose
# create-only writes overwrite. Installed by `make test` under
# target/tools/s3rver from mk/s3rver's lockfile (integrity hashes; no
# install scripts run). Included by the Makefile, after mk/guests.mk
# (which sets TOOLS_DIR).

S3RVER_TOOLS := $(TOOLS_DIR)/s3rver
S3RVER := $(S3RVER_TOOLS)/node_modules/.bin/s3rver

.PHONY: s3rver

s3rver: $(S3RVER)

$(S3RVER): mk/s3rver/package.json mk/s3rver/package-lock.json
	@command -v npm >/dev/null || { echo "s3rver: npm is missing: apt-get install -y nodejs npm" >&2; exit 1; }
	@mkdir -p $(S3RVER_TOOLS)
	cp mk/s3rver/package.json mk/s3rver/package-lock.json $(S3RVER_TOOLS)/
	cd $(S3RVER_TOOLS) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
	@touch $@
