# PostgreSQL (issue 14): the store conformance suite runs on PostgreSQL as
# well as SQLite. The tests start a throwaway cluster themselves
# (host/store/postgres/pgtest: initdb into a temp dir, a unix socket in it,
# no TCP port, stopped when the test binary ends), so `make test` only needs
# the server binaries, Debian's postgresql-15. Point the tests at another
# server with MOAT_TEST_POSTGRES=postgres://... (a role that may CREATE
# DATABASE); without either, the PostgreSQL tests skip, or fail under
# MOAT_REQUIRE_TOOLS=1.
TEST_APT_PACKAGES += postgresql-15
TEST_SETUP += postgres-check

.PHONY: postgres-check
postgres-check:
	@test -x /usr/lib/postgresql/15/bin/initdb || test -n "$$MOAT_TEST_POSTGRES" || { \
		echo "postgres-check: /usr/lib/postgresql/15/bin/initdb is missing; run make test-tools (apt-get install postgresql-15) or set MOAT_TEST_POSTGRES"; exit 1; }
