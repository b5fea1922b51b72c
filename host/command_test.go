package host_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/internal/testwasm"
)

func TestRunCommand(t *testing.T) {
	testenv.Timing(t)
	h := newHost(t, nil)
	m, err := h.Load(context.Background(), testwasm.BuildGo(t, "./testdata/gocmd", false), host.LoadOptions{Name: "gocmd"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind() != host.KindCommand {
		t.Fatalf("kind %s", m.Kind())
	}
	run := func(args []string, env map[string]string, stdin string, lim host.Limits) (string, string, host.RunResult, error) {
		var out, errb bytes.Buffer
		res, err := m.Run(context.Background(), host.RunRequest{
			Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
			Args: args, Env: env, Principal: ann, Limits: lim,
		})
		return out.String(), errb.String(), res, err
	}

	t.Run("stdio args env", func(t *testing.T) {
		out, errOut, res, err := run([]string{"a", "b c"}, map[string]string{"GREETING": "hi"}, "some input", host.Limits{})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("%v exit %d", err, res.ExitCode)
		}
		if want := `stdin="some input" args=["a" "b c"] GREETING="hi" HOME=""` + "\n"; out != want {
			t.Fatalf("stdout %q, want %q", out, want)
		}
		if errOut != "to stderr\n" {
			t.Fatalf("stderr %q", errOut)
		}
	})
	t.Run("exit code", func(t *testing.T) {
		_, errOut, res, err := run([]string{"exit", "7"}, nil, "", host.Limits{})
		if err != nil || res.ExitCode != 7 || errOut != "exiting with 7\n" {
			t.Fatalf("exit %d, %v, stderr %q", res.ExitCode, err, errOut)
		}
	})
	failures := []struct {
		name string
		args []string
		lim  host.Limits
		code abi.Code
	}{
		{"timeout", []string{"loop"}, host.Limits{Timeout: 100 * time.Millisecond}, abi.CodeTimeout},
		{"output flood", []string{"flood"}, host.Limits{MaxOutputBytes: 64 << 10}, abi.CodeOutputTooLarge},
		{"memory", []string{"alloc"}, host.Limits{MemoryLimitPages: 512}, abi.CodeMemoryLimit},
	}
	for _, tt := range failures {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			out, _, _, err := run(tt.args, nil, "", tt.lim)
			if abi.CodeOf(err) != tt.code {
				t.Fatalf("got %v, want %s", err, tt.code)
			}
			if tt.code == abi.CodeOutputTooLarge && len(out) != 64<<10 {
				t.Fatalf("flood passed %d bytes, want exactly the cap", len(out))
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("took %s", time.Since(start))
			}
		})
	}
	// And the module still runs.
	if out, _, res, err := run(nil, nil, "x", host.Limits{}); err != nil || res.ExitCode != 0 || !strings.HasPrefix(out, `stdin="x"`) {
		t.Fatalf("after failures: %q %v", out, err)
	}
}

func TestRunRejectsPluginAndInvokeRejectsCommand(t *testing.T) {
	t.Parallel()
	h := newHost(t, nil)
	p := loadPlugin(t, h, host.LoadOptions{})
	if _, err := p.Run(context.Background(), host.RunRequest{Principal: ann}); !errors.Is(err, host.ErrNoSuchAction) {
		t.Fatalf("run plugin: %v", err)
	}
	c, err := h.Load(context.Background(), fixture(t, "bigmem.wasm"), host.LoadOptions{Name: "bigmem"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Invoke(context.Background(), host.Request{Action: "x", Principal: ann}); !errors.Is(err, host.ErrNoSuchAction) {
		t.Fatalf("invoke command: %v", err)
	}
	// Its initial 512 pages exceed a 256-page limit.
	if _, err := c.Run(context.Background(), host.RunRequest{Principal: ann, Limits: host.Limits{MemoryLimitPages: 256}}); !errors.Is(err, host.ErrMemoryLimit) {
		t.Fatalf("bigmem: %v", err)
	}
}
