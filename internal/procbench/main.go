// Command procbench times two whole processes side by side, as a person
// meets them: from the start of each to its exit, start-up included. A
// (moat) and B (the baseline a user compares it with: python3 -c, node -e,
// a native binary) run in turn, A B A B..., after a warm-up of each, and
// the ratio is taken pair by pair, so that a machine whose speed drifts
// (one shared by other work) moves both sides of each pair alike. It
// prints the medians of wall time, CPU time (user + system, the kernel's
// accounting of the child) and peak memory (the child's largest resident
// set), and the median of the pairs' wall and CPU ratios: the figures of
// the README's whole-process table, which `make bench` prints.
//
//	procbench [-n RUNS] [-label L] A... --vs B...
//
// A's and B's output is discarded, their stdin empty. An exit other than
// 0 is reported and fails the command: a failing run is no measurement.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"
)

// sample is one finished run.
type sample struct {
	wall, cpu time.Duration
	peakKiB   int64
}

func main() {
	n := flag.Int("n", 9, "pairs of runs counted, after one warm-up of each")
	label := flag.String("label", "", "the row's name (default: A's command line)")
	flag.Parse()
	args := flag.Args()
	i := slices.Index(args, "--vs")
	if i <= 0 || i == len(args)-1 || *n < 1 {
		fmt.Fprintln(os.Stderr, "usage: procbench [-n RUNS] [-label L] A... --vs B...")
		os.Exit(2)
	}
	a, b := args[:i], args[i+1:]
	if *label == "" {
		*label = strings.Join(a, " ")
	}
	var as, bs []sample
	for r := -1; r < *n; r++ { // r == -1: the warm-up, not counted
		sa, err := run(a)
		if err != nil {
			fail(a, err)
		}
		sb, err := run(b)
		if err != nil {
			fail(b, err)
		}
		if r >= 0 {
			as, bs = append(as, sa), append(bs, sb)
		}
	}
	var wallRatio, cpuRatio []float64
	for k := range as {
		wallRatio = append(wallRatio, float64(as[k].wall)/float64(bs[k].wall))
		cpuRatio = append(cpuRatio, float64(as[k].cpu)/float64(max(bs[k].cpu, time.Microsecond)))
	}
	fmt.Printf("| %s | %s wall, %s CPU, %.0f MiB | %s wall, %s CPU, %.0f MiB (`%s`) | %.2fx wall, %.2fx CPU |\n",
		*label, ms(median(as, wallOf)), ms(median(as, cpuOf)), float64(median(as, peakOf))/1024,
		ms(median(bs, wallOf)), ms(median(bs, cpuOf)), float64(median(bs, peakOf))/1024, strings.Join(b, " "),
		medianOf(wallRatio), medianOf(cpuRatio))
}

func run(argv []string) (sample, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	start := time.Now()
	err := cmd.Run() // stdin, stdout and stderr: the null device
	wall := time.Since(start)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return sample{}, fmt.Errorf("exit status %d", ee.ExitCode())
		}
		return sample{}, err
	}
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	s := sample{wall: wall, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	if ru != nil {
		s.peakKiB = ru.Maxrss
	}
	return s, nil
}

func fail(argv []string, err error) {
	fmt.Fprintf(os.Stderr, "procbench: %s: %v (run it by hand to see why)\n", strings.Join(argv, " "), err)
	os.Exit(1)
}

func wallOf(s sample) int64 { return int64(s.wall) }
func cpuOf(s sample) int64  { return int64(s.cpu) }
func peakOf(s sample) int64 { return s.peakKiB }

func median(ss []sample, f func(sample) int64) int64 {
	v := make([]int64, len(ss))
	for i, s := range ss {
		v[i] = f(s)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func medianOf(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v[len(v)/2]
}

func ms(d int64) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
