package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

// sessionExecCmd is `moat session exec ID CMD...`: a command in the
// session's workspace (POST /v1/sessions/{id}/commands), its output
// streamed as produced (server-sent events) and its exit status moat's.
func sessionExecCmd(client func() (*sessionClient, error), path func(id, rest string) string) *cobra.Command {
	var (
		background bool
		cwd        string
		envs       []string
		timeout    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "exec ID CMD...",
		Short: "Run a command (bash -c) in a session's workspace, its output as it comes, its exit status moat's",
		Long: `The command line is run by bash -c as a native job under every kernel
layer, in the session's workspace (/home/user), with the session's
variables and bash's text utilities; no network. With --background it
keeps running after moat returns (until it ends or the session does) and
its pid is printed: GET /v1/sessions/ID/commands/PID/stream follows it.`,
		Example: `  moat session exec $S 'ls -la; wc -l data.csv'
  moat session exec $S --background 'sleep 600'`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			env := map[string]string{}
			for _, e := range envs {
				k, v, ok := strings.Cut(e, "=")
				if !ok {
					return usagef("--env %q: give NAME=value", e)
				}
				env[k] = v
			}
			body, _ := json.Marshal(map[string]any{"cmd": strings.Join(args[1:], " "), "cwd": cwd, "envs": env,
				"background": background, "timeout": int(timeout / time.Second)})
			if background {
				raw, err := c.do(cmd.Context(), http.MethodPost, path(args[0], "/commands"), bytes.NewReader(body), http.StatusCreated)
				if err != nil {
					return err
				}
				var r struct{ PID int }
				if err := json.Unmarshal(raw, &r); err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), r.PID)
				return nil
			}
			code, err := c.stream(cmd.Context(), path(args[0], "/commands"), body, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code: min(max(code, 1), 255)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&background, "background", false, "start it and print its pid; it runs on after moat returns")
	f.StringVar(&cwd, "cwd", "", "working directory beneath /home/user (default /home/user)")
	f.StringArrayVar(&envs, "env", nil, "NAME=value for the command (repeatable)")
	f.DurationVar(&timeout, "command-timeout", 0, "end the command after this long (default: when the session ends)")
	return cmd
}

// stream posts body with Accept: text/event-stream and copies the
// command's output events to stdout and stderr as they come; it returns
// the command's exit code. Unlike do, it has no overall timeout: a
// command runs as long as it runs (Ctrl-C ends the request, and with it
// the foreground command).
func (c *sessionClient) stream(ctx context.Context, path string, body []byte, stdout, stderr io.Writer) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("session: %w (is moat serve running at %s? --server or $%s names another)", err, c.base, envServer)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		// A refusal is a problem document, read as do reads one.
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		var p server.Problem
		if json.Unmarshal(raw, &p) != nil || p.Title == "" {
			return 0, fmt.Errorf("session: %s answered %s: %s", c.base, res.Status, oneLineString(string(raw)))
		}
		reason := p.Title
		if p.Detail != "" {
			reason = p.Detail
		}
		return 0, &host.Error{Code: abi.Code(p.Code), Reason: fmt.Sprintf("session: %s: %s", res.Status, reason)}
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	var event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data := line[len("data: "):]
			switch event {
			case "stdout", "stderr":
				var ch struct{ Data, Encoding string }
				if json.Unmarshal([]byte(data), &ch) != nil {
					continue
				}
				b := []byte(ch.Data)
				if ch.Encoding == "base64" {
					if b, err = base64.StdEncoding.DecodeString(ch.Data); err != nil {
						continue
					}
				}
				w := stdout
				if event == "stderr" {
					w = stderr
				}
				io.WriteString(w, termSafeText(string(b)))
			case "end":
				var end struct {
					ExitCode *int `json:"exit_code"`
					Status   string
					Reason   string
				}
				if err := json.Unmarshal([]byte(data), &end); err != nil || end.ExitCode == nil {
					return 0, fmt.Errorf("session: the command's end: %s", oneLineString(data))
				}
				if end.Reason != "" && end.Status != "ok" && end.Status != "runtime-error" {
					fmt.Fprintf(stderr, "moat: the command ended: %s: %s\n", end.Status, termSafe(end.Reason))
				}
				return *end.ExitCode, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("session: reading the command's output: %w", err)
	}
	return 0, fmt.Errorf("session: the stream ended before the command did")
}
