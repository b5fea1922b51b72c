# moat serve (issue 6): the web console's end-to-end test drives Debian's
# chromium headless over the DevTools protocol (server/console_test.go).
TEST_APT_PACKAGES += chromium

.PHONY: serve
serve: build examples ## build moat and the example, and start the server on 127.0.0.1:8080
	@echo "==> $(MOAT) serve (create a key in another terminal: $(MOAT) keys create --org acme --user $$USER)"
	@$(MOAT) serve
