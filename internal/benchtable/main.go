// Command benchtable reads `go test -bench` output on stdin, passes it
// through, and then prints the side-by-side table that `make bench` shows
// and the README quotes: each moat figure next to its baseline from the
// same run, with the ratio the goals are stated in.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// result is one benchmark line: ns/op and any custom metrics.
type result map[string]float64

var line = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)

func parse(r io.Reader, echo io.Writer) (map[string]result, string) {
	results := map[string]result{}
	cpu := ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		text := sc.Text()
		fmt.Fprintln(echo, text)
		if strings.HasPrefix(text, "cpu: ") {
			cpu = strings.TrimSpace(strings.TrimPrefix(text, "cpu: "))
		}
		m := line.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		res := result{}
		fields := strings.Fields(m[3])
		for i := 0; i+1 < len(fields); i += 2 {
			if v, err := strconv.ParseFloat(fields[i], 64); err == nil {
				res[fields[i+1]] = v
			}
		}
		results[strings.TrimPrefix(m[1], "Benchmark")] = res
	}
	return results, cpu
}

func main() {
	results, cpu := parse(os.Stdin, os.Stdout)
	get := func(name, unit string) (float64, bool) {
		r, ok := results[name]
		if !ok {
			return 0, false
		}
		v, ok := r[unit]
		return v, ok
	}
	type row struct{ what, moat, baseline, ratio, goal string }
	var rows []row
	if m, ok := get("Invoke/moat", "ns/op"); ok {
		if raw, ok := get("Invoke/raw-wazero", "ns/op"); ok {
			rows = append(rows, row{"invoke, pooled, deadline on, allowed-call audit off (vs raw wazero CallWithStack)", ns(m), ns(raw),
				fmt.Sprintf("+%s overhead", ns(m-raw)), verdict(m-raw < 1000, "< 1 µs overhead")})
		}
		if au, ok := get("Invoke/moat-audited", "ns/op"); ok {
			rows = append(rows, row{"invoke, pooled, every allowed call written to the audit trail (the default)", ns(au), ns(m),
				fmt.Sprintf("+%s per audit row", ns(au-m)), verdict(au-m <= 2000, "<= 2 µs per allowed call")})
		}
		if au, ok := get("Invoke/moat-audited-postgres", "ns/op"); ok {
			if pm, ok := get("Invoke/moat-postgres", "ns/op"); ok {
				rows = append(rows, row{"invoke, pooled, every allowed call written to the audit trail, PostgreSQL", ns(au), ns(pm),
					fmt.Sprintf("+%s per audit row", ns(au-pm)), "report"})
			}
		}
		if ex, ok := get("Invoke/extism", "ns/op"); ok {
			rows = append(rows, row{"invoke, pooled (vs extism go-sdk Plugin.Call)", ns(m), ns(ex),
				fmt.Sprintf("%.1fx faster", ex/m), verdict(ex/m >= 10, ">= 10x")})
		}
	}
	if m, ok := get("OpRoundTrip/moat-config.get", "ns/call"); ok {
		if raw, ok := get("OpRoundTrip/raw-host-function", "ns/call"); ok {
			rows = append(rows, row{"op round trip config.get (vs raw host function)", ns(m), ns(raw),
				fmt.Sprintf("%.1fx", m/raw), verdict(m < 1500, "< 1.5 µs")})
		}
	}
	if m, ok := get("GuestCompute/moat", "ns/op"); ok {
		if raw, ok := get("GuestCompute/raw-wazero-closeondone", "ns/op"); ok {
			rows = append(rows, row{"Go guest, 64 KiB bytes.ToUpper, deadline on (vs raw wazero with CloseOnContextDone)", us(m), us(raw),
				fmt.Sprintf("%.1fx faster", raw/m), "report"})
		}
		if floor, ok := get("GuestCompute/raw-wazero-unchecked", "ns/op"); ok {
			rows = append(rows, row{"the same (vs raw wazero with no deadline check at all: a guest that could never be stopped)", us(m), us(floor),
				fmt.Sprintf("%.2fx", m/floor), "report"})
		}
	}
	if m, ok := get("FreshInvoke/wat", "ns/op"); ok {
		raw, _ := get("FreshInvoke/raw-wat-instantiate", "ns/op")
		rows = append(rows, row{"fresh instance + invoke, small WAT module (vs raw instantiate+close)", us(m), us(raw),
			fmt.Sprintf("%.1fx", m/raw), "report"})
	}
	if m, ok := get("FreshInvoke/go-reactor", "ns/op"); ok {
		raw, _ := get("FreshInvoke/raw-go-instantiate+init", "ns/op")
		noInit, _ := get("FreshInvoke/raw-go-instantiate-no-init", "ns/op")
		rows = append(rows, row{"fresh instance + invoke, Go reactor (vs raw instantiate + _initialize)", ms(m), ms(raw),
			fmt.Sprintf("%.2fx", m/raw), fmt.Sprintf("report: _initialize %s, instantiate %s", ms(raw-noInit), ms(noInit))})
	}
	if c, ok := get("LoadGoGuest/compile", "ns/op"); ok {
		for _, l := range []struct{ name, what string }{
			{"shared-code-postgres", "load the 3.5 MB Go guest with an empty cache from the machine code another replica shared, PostgreSQL (vs compiling it)"},
			{"shared-code-sqlite", "load the 3.5 MB Go guest with an empty cache from shared machine code, SQLite (vs compiling it)"},
			{"disk-cache", "load the 3.5 MB Go guest from wazero's cache on this machine's disk (vs compiling it)"},
		} {
			if v, ok := get("LoadGoGuest/"+l.name, "ns/op"); ok {
				rows = append(rows, row{l.what, ms(v), ms(c), fmt.Sprintf("%.1fx faster", c/v), "report"})
			}
		}
	}
	for _, be := range []string{"sqlite", "postgres"} {
		if p50, ok := get("TaskEnqueueToStart/"+be, "p50-µs"); ok {
			p99, _ := get("TaskEnqueueToStart/"+be, "p99-µs")
			rows = append(rows, row{"background task, enqueue to the start of its attempt, runner in the same process, " + be,
				fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", p50/1000, p99/1000), "", "", "report"})
		}
	}
	for _, sp := range []struct{ what, native, plain string }{
		{"spawn-to-exit /usr/bin/true through the full native runner (vs plain os/exec)", "Spawn/native-true", "Spawn/plain-true"},
		{"spawn-to-exit python3 -c pass through the full native runner (vs plain os/exec)", "Spawn/native-python", "Spawn/plain-python"},
		{"spawn-to-exit /usr/bin/true, warm wrapper from a native.Pool, back to back (vs plain os/exec)", "Spawn/native-warm-true", "Spawn/plain-true"},
		{"spawn-to-exit python3 -c pass, warm wrapper from a native.Pool, back to back (vs plain os/exec)", "Spawn/native-warm-python", "Spawn/plain-python"},
		{"spawn-to-exit python3 -c pass, cold, one run every 30 ms (vs plain os/exec, likewise)", "Spawn/native-python-spaced", "Spawn/plain-python-spaced"},
		{"spawn-to-exit python3 -c pass, warm wrapper from a native.Pool, one run every 30 ms (vs plain os/exec, likewise)", "Spawn/native-warm-python-spaced", "Spawn/plain-python-spaced"},
	} {
		n, ok1 := get(sp.native, "ns/op")
		p, ok2 := get(sp.plain, "ns/op")
		if !ok1 || !ok2 {
			continue
		}
		goal := "report"
		if strings.Contains(sp.native, "python") {
			goal = verdict(n/p <= 1.5, "layers add <= 50%")
		}
		rows = append(rows, row{sp.what, ms(n), ms(p), fmt.Sprintf("%.2fx", n/p), goal})
	}
	// moat serve over HTTP/1.1 keep-alive (server's
	// BenchmarkGreetVsCeiling): throughput against a do-nothing echo
	// handler measured in the same run.
	if ceil, ok := get("GreetVsCeiling/ceiling", "req/s"); ok {
		for _, h := range []struct {
			name, what string
			goal       float64 // fraction of the ceiling; 0: report
		}{
			{"echo", "echo action of a Go guest over HTTP, SQLite (vs a do-nothing echo handler)", 0.70},
			{"greet", "greet (4 ops, a durable kv write) over HTTP, SQLite, group commit, one organization (vs a do-nothing echo handler)", 0.25},
			{"greet-org8", "greet over HTTP, SQLite, admission org_invocations 8 so an org's kv writes can share a commit (vs a do-nothing echo handler)", 0.25},
			{"greet-8orgs", "greet over HTTP, SQLite, 8 organizations at once, default admission: a multi-tenant server (vs a do-nothing echo handler)", 0.25},
			{"echo-postgres", "echo action over HTTP, PostgreSQL (vs a do-nothing echo handler)", 0},
			{"greet-postgres", "greet over HTTP, PostgreSQL, group commit (vs a do-nothing echo handler)", 0},
			{"greet-org8-postgres", "greet over HTTP, PostgreSQL, admission org_invocations 8 (vs a do-nothing echo handler)", 0},
			{"greet-8orgs-postgres", "greet over HTTP, PostgreSQL, 8 organizations at once, default admission (vs a do-nothing echo handler)", 0},
		} {
			v, ok := get("GreetVsCeiling/"+h.name, "req/s")
			if !ok {
				continue
			}
			goal := "report"
			if h.goal > 0 {
				goal = verdict(v/ceil >= h.goal, fmt.Sprintf(">= %.0f%%", 100*h.goal))
			}
			what := h.what
			if wc, ok := get("GreetVsCeiling/"+h.name, "kv-writes/commit"); ok {
				what += fmt.Sprintf("; %.1f kv writes per commit", wc)
			}
			rows = append(rows, row{what, rps(v), rps(ceil), fmt.Sprintf("%.0f%%", 100*v/ceil), goal})
		}
	}
	if len(rows) == 0 {
		fmt.Println("\nbenchtable: no known benchmarks in the input")
		os.Exit(1)
	}
	fmt.Printf("\nmoat side by side (%s)\n\n", cpu)
	fmt.Println("| what | moat | baseline | ratio | goal |")
	fmt.Println("|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s | %s | %s |\n", r.what, r.moat, r.baseline, r.ratio, r.goal)
	}
}

func verdict(ok bool, goal string) string {
	if ok {
		return "met (" + goal + ")"
	}
	return "MISSED (" + goal + ")"
}

func ns(v float64) string  { return fmt.Sprintf("%.0f ns", v) }
func us(v float64) string  { return fmt.Sprintf("%.1f µs", v/1e3) }
func ms(v float64) string  { return fmt.Sprintf("%.2f ms", v/1e6) }
func rps(v float64) string { return fmt.Sprintf("%.0f req/s", v) }
