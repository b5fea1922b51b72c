# Whole processes as a person meets them (issue 35): `moat exec` started
# afresh each time, its caches warm, beside the program a user compares it
# with, run in turn in one call (internal/procbench). `make bench` runs it
# first; PROC_RUNS pairs each (default 9). The --lang rows are served by
# the warm moat (moat exec-daemon), warmed first until it answers; the
# in-process rows (MOAT_NO_DAEMON=1) show what a run costs without it. The
# daemon exits by itself once the temporary data directory is gone.
PROC_RUNS ?= 9

.PHONY: bench-process
bench: bench-process

bench-process: build ## whole-process moat exec (python, javascript, C, native python3) beside /usr/bin/python3 -c, node -e, the native binary, as a table
	@echo "==> whole processes, warm caches: moat exec beside the program a user compares it with, in turn ($(PROC_RUNS) pairs each)"
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	printf '#include <stdio.h>\nint main(void) { puts("1"); return 0; }\n' > "$$d/main.c" && \
	cc -O2 -o "$$d/native" "$$d/main.c" && \
	$(GO) build -o "$$d/procbench" ./internal/procbench && \
	P="$$d/procbench -n $(PROC_RUNS)" && M="$(MOAT) exec --data $$d/data" && \
	warm() { for i in $$(seq 120); do MOAT_DAEMON_SAY=1 $$M "$$@" 2>&1 >/dev/null | grep -q 'run by the warm moat' && return 0; sleep 1; done; echo "no warm moat served $$*" >&2; return 1; } && \
	warm --lang python -e 'print(1)' && warm --lang javascript -e 'console.log(1)' && warm --lang c "$$d/main.c" && \
	echo "| what | moat | baseline | ratio (median of the pairs) |" && echo "|---|---|---|---|" && \
	$$P -label "moat exec --lang python -e 'print(1)' (the warm moat)" $$M --lang python -e 'print(1)' --vs /usr/bin/python3 -c 'print(1)' && \
	$$P -label "moat exec --lang javascript -e 'console.log(1)' (the warm moat)" $$M --lang javascript -e 'console.log(1)' --vs node -e 'console.log(1)' && \
	$$P -label "moat exec --lang c main.c (the warm moat, build cache warm)" $$M --lang c "$$d/main.c" --vs "$$d/native" && \
	$$P -label "moat exec --lang python -e 'print(1)' (in process, MOAT_NO_DAEMON=1)" env MOAT_NO_DAEMON=1 $$M --lang python -e 'print(1)' --vs /usr/bin/python3 -c 'print(1)' && \
	$$P -label "moat exec --lang c main.c (in process, MOAT_NO_DAEMON=1)" env MOAT_NO_DAEMON=1 $$M --lang c "$$d/main.c" --vs "$$d/native" && \
	$$P -label "moat exec --native -- python3 -c pass" $$M --native -- python3 -c pass --vs /usr/bin/python3 -c pass
