# The web console's code editor (issue 17): CodeMirror 6 from the npm
# registry, bundled by esbuild into server/console/editor.js, which
# is committed and embedded in the binary (no npm at `make build`, no CDN
# at run time). The versions are exact in package.json and the whole tree
# is pinned with integrity hashes in package-lock.json; editor.js.sha256
# records the bundle, and TestConsoleEditorBundle checks the embedded file
# against it. `make console-editor-check` rebuilds from the registry and
# fails when the bytes differ from the committed bundle.
CONSOLE_EDITOR     := server/console/editor
CONSOLE_EDITOR_OUT := server/console/editor.js
# The esbuild flags are part of the bundle's identity: keep them in one place.
CONSOLE_ESBUILD    := entry.mjs --bundle --minify --format=iife --target=es2020 --legal-comments=eof --log-level=warning

.PHONY: console-editor console-editor-check
console-editor: npm ## rebuild the console's editor bundle (CodeMirror) from the pinned npm packages
	@echo "==> npm ci ($(CONSOLE_EDITOR)) and esbuild $(CONSOLE_EDITOR_OUT)"
	@cd $(CONSOLE_EDITOR) && npm ci --no-audit --no-fund --loglevel=error && ./node_modules/.bin/esbuild $(CONSOLE_ESBUILD) --outfile=../editor.js
	@cd server/console && sha256sum editor.js > editor/editor.js.sha256 && cat editor/editor.js.sha256

console-editor-check: npm ## rebuild the editor bundle into a temp file and compare it with the committed one
	@echo "==> npm ci ($(CONSOLE_EDITOR)) and esbuild into a temp file"
	@cd $(CONSOLE_EDITOR) && npm ci --no-audit --no-fund --loglevel=error && tmp=$$(mktemp -d) && \
		./node_modules/.bin/esbuild $(CONSOLE_ESBUILD) --outfile=$$tmp/editor.js && \
		cd $$tmp && sed 's/ .*//' $(CURDIR)/$(CONSOLE_EDITOR)/editor.js.sha256 | { read want; got=$$(sha256sum editor.js | cut -d' ' -f1); rm -rf $$tmp; \
		if [ "$$got" != "$$want" ]; then echo "the rebuilt editor.js ($$got) differs from the committed one ($$want): run make console-editor and commit"; exit 1; fi; echo "editor.js rebuilds to the committed bytes ($$got)"; }
