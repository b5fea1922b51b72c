# The MCP client the tests drive against moat serve's /mcp and moat mcp
# (issue 32): the TypeScript SDK (@modelcontextprotocol/sdk) from the npm
# registry, run by node (APT_PACKAGES has nodejs). The version is exact in
# testdata/mcpclient/package.json and the tree pinned with integrity
# hashes in its package-lock.json; `npm ci` installs exactly that. A test
# that finds no node_modules there skips, unless make test requires it
# (MOAT_REQUIRE_TOOLS=1).
MCP_CLIENT := testdata/mcpclient

TEST_SETUP += mcp-client
.PHONY: mcp-client
mcp-client: npm ## install the pinned MCP client (TypeScript SDK) the MCP tests drive
	@echo "==> npm ci ($(MCP_CLIENT))"
	@cd $(MCP_CLIENT) && npm ci --no-audit --no-fund --loglevel=error
