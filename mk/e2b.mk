# The stock E2B SDKs (issue 31): server/e2b_test.go's TestE2BSDK runs an
# agent's script with npm's e2b and @e2b/code-interpreter against a moat
# server, as a user of E2B would point them at moat. The versions are
# exact in server/testdata/e2b/package.json and the whole tree is pinned
# with integrity hashes in its package-lock.json; npm ci installs exactly
# that into the git-ignored node_modules beside it. `make test` runs it
# first (MOAT_REQUIRE_TOOLS=1 then fails the test if the SDKs are absent);
# `make check` skips the test (it is slow) and needs none of this.
E2B_SDK := server/testdata/e2b

.PHONY: e2b-sdk
e2b-sdk: npm ## install the pinned E2B SDKs (npm e2b, @e2b/code-interpreter) the E2B API's test drives
	@echo "==> npm ci ($(E2B_SDK))"
	@cd $(E2B_SDK) && npm ci --no-audit --no-fund --loglevel=error

TEST_SETUP += e2b-sdk

# npm: the one node ships, when it ships one (NodeSource's nodejs does, and
# conflicts with Debian's npm package), else Debian's.
.PHONY: npm npm-apt
npm:
	@command -v npm >/dev/null 2>&1 || $(MAKE) --no-print-directory npm-apt
npm-apt:
	$(call apt_install,npm)
