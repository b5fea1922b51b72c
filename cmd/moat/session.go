package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newSessionCmd) }

// maxSessionResponse bounds what moat session reads of an answer (a
// download is bounded by the server's sessions.max_file_bytes too).
const maxSessionResponse = 256 << 20

// sessionClient talks to /v1/sessions on a moat serve, found and
// authenticated as moat deploy is (--server, $MOAT_SERVER; --key-file,
// $MOAT_API_KEY).
type sessionClient struct {
	base, key string
	timeout   time.Duration
}

// do sends a request and returns the answer's body, or the server's
// problem as an error carrying its code (the exit status follows it).
func (c *sessionClient) do(ctx context.Context, method, path string, body io.Reader, want int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil && method != http.MethodPut {
		req.Header.Set("Content-Type", "application/json")
	}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true},
		// A redirect would carry the key to wherever it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("session: %w (is moat serve running at %s? --server or $%s names another)", err, c.base, envServer)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxSessionResponse))
	if err != nil {
		return nil, fmt.Errorf("session: reading the answer: %w", err)
	}
	if res.StatusCode != want {
		var p server.Problem
		if json.Unmarshal(raw, &p) != nil || p.Title == "" {
			return nil, fmt.Errorf("session: %s answered %s: %s", c.base, res.Status, oneLineString(string(raw)))
		}
		reason := p.Title
		if p.Detail != "" {
			reason = p.Detail
		}
		return nil, &host.Error{Code: abi.Code(p.Code), Reason: fmt.Sprintf("session: %s: %s", res.Status, reason)}
	}
	return raw, nil
}

func newSessionCmd(_ *globalFlags) *cobra.Command {
	var (
		serverURL, keyFile string
		timeout            time.Duration
	)
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Make and use sessions on a moat server: sandboxes that keep state between steps",
		Long: `A session (POST /v1/sessions) is a sandbox on a running moat serve that
keeps code contexts, whose variables persist between runs, and a workspace
of files (/home/user), until it is killed, times out or is left idle. It
is the API key's user's and organization's; nobody else sees it.

The server and key are found as moat deploy finds them: --server, else
$MOAT_SERVER, else http://127.0.0.1:8080; --key-file, else $MOAT_API_KEY.`,
		Example: `  S=$(moat session create)
  moat session run $S --language python 'x = 21'
  moat session run $S --language python 'x * 2'          # 42
  moat session files put $S data.csv ./data.csv
  moat session files get $S out.txt > out.txt
  moat session files ls $S
  K=$(moat session fork $S)                              # x is 21 in $K too
  moat session pause $S && moat session resume $S
  moat session kill $S`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&serverURL, "server", "", "the moat server's URL (default $"+envServer+", else http://127.0.0.1:8080)")
	pf.StringVar(&keyFile, "key-file", "", "a file holding the API key (default $"+envAPIKey+")")
	pf.DurationVar(&timeout, "timeout", 2*time.Minute, "limit of each request")
	client := func() (*sessionClient, error) {
		base, err := deployServer(serverURL)
		if err != nil {
			return nil, err
		}
		key, err := deployKey(keyFile)
		if err != nil {
			return nil, err
		}
		return &sessionClient{base: base, key: key, timeout: timeout}, nil
	}
	path := func(id string, rest string) string { return "/v1/sessions/" + url.PathEscape(id) + rest }

	var ttl time.Duration
	create := &cobra.Command{
		Use:   "create",
		Short: "Make a session and print its id",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			body, _ := json.Marshal(map[string]any{"timeout": int(ttl / time.Second)})
			raw, err := c.do(cmd.Context(), http.MethodPost, "/v1/sessions", bytes.NewReader(body), http.StatusCreated)
			if err != nil {
				return err
			}
			var in struct{ ID string }
			if err := json.Unmarshal(raw, &in); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), termSafe(in.ID))
			return nil
		},
	}
	create.Flags().DurationVar(&ttl, "ttl", 0, "how long the session lives (default the server's sessions.timeout)")

	var language, context string
	run := &cobra.Command{
		Use:   "run ID CODE",
		Short: "Run code in one of the session's contexts; - reads it from stdin",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			code := args[1]
			if code == "-" {
				b, err := io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20+1))
				if err != nil {
					return err
				}
				code = string(b)
			}
			body, _ := json.Marshal(map[string]string{"language": language, "code": code, "context": context})
			raw, err := c.do(cmd.Context(), http.MethodPost, path(args[0], "/run"), bytes.NewReader(body), http.StatusOK)
			if err != nil {
				return err
			}
			var res struct {
				Stdout, Stderr string
				Result         *string
				Error          *struct{ Name, Value, Traceback string }
			}
			if err := json.Unmarshal(raw, &res); err != nil {
				return err
			}
			io.WriteString(cmd.OutOrStdout(), termSafeText(res.Stdout))
			io.WriteString(cmd.ErrOrStderr(), termSafeText(res.Stderr))
			if res.Result != nil {
				fmt.Fprintln(cmd.OutOrStdout(), termSafeText(*res.Result))
			}
			if res.Error != nil {
				io.WriteString(cmd.ErrOrStderr(), termSafeText(res.Error.Traceback))
				return &host.Error{Code: abi.CodeGuestError, Reason: termSafe(res.Error.Name + ": " + res.Error.Value)}
			}
			return nil
		},
	}
	run.Flags().StringVar(&language, "language", "python", "python or javascript")
	run.Flags().StringVar(&context, "context", "", "the context's name (default the language's)")

	kill := &cobra.Command{
		Use:   "kill ID",
		Short: "End a session: its interpreters stop and its workspace is removed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			_, err = c.do(cmd.Context(), http.MethodDelete, path(args[0], ""), nil, http.StatusNoContent)
			return err
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List your live sessions (JSON)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			raw, err := c.do(cmd.Context(), http.MethodGet, "/v1/sessions", nil, http.StatusOK)
			if err != nil {
				return err
			}
			var out bytes.Buffer
			if json.Indent(&out, raw, "", "  ") == nil {
				raw = append(out.Bytes(), '\n')
			}
			_, err = cmd.OutOrStdout().Write(raw)
			return err
		},
	}
	var count int
	fork := &cobra.Command{
		Use:   "fork ID",
		Short: "Copy a session (its contexts' variables and its files) and print the copies' ids",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			body, _ := json.Marshal(map[string]int{"count": count})
			raw, err := c.do(cmd.Context(), http.MethodPost, path(args[0], "/fork"), bytes.NewReader(body), http.StatusCreated)
			if err != nil {
				return err
			}
			var out struct{ Sessions []struct{ ID string } }
			if err := json.Unmarshal(raw, &out); err != nil {
				return err
			}
			for _, s := range out.Sessions {
				fmt.Fprintln(cmd.OutOrStdout(), termSafe(s.ID))
			}
			return nil
		},
	}
	fork.Flags().IntVar(&count, "count", 1, "how many copies (1 to 100; all must fit your organization's session limit)")
	pause := &cobra.Command{
		Use:   "pause ID",
		Short: "Pause a session: it is kept as an image (memory, files) and ends until resumed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			_, err = c.do(cmd.Context(), http.MethodPost, path(args[0], "/pause"), nil, http.StatusNoContent)
			return err
		},
	}
	resume := &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a paused session, with its variables and files",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			_, err = c.do(cmd.Context(), http.MethodPost, path(args[0], "/resume"), nil, http.StatusOK)
			return err
		},
	}
	cmd.AddCommand(create, run, kill, list, fork, pause, resume, sessionFilesCmd(client, path), sessionExecCmd(client, path))
	return cmd
}

func sessionFilesCmd(client func() (*sessionClient, error), path func(id, rest string) string) *cobra.Command {
	files := &cobra.Command{Use: "files", Short: "Upload, download, list and remove files in a session's workspace"}
	q := func(p string) string { return "?path=" + url.QueryEscape(p) }
	put := &cobra.Command{
		Use:   "put ID PATH LOCAL",
		Short: "Upload the local file LOCAL (- for stdin) to PATH in the workspace",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			var r io.Reader = cmd.InOrStdin()
			if args[2] != "-" {
				f, err := os.Open(args[2])
				if err != nil {
					return usagef("%v", err)
				}
				defer f.Close()
				r = f
			}
			_, err = c.do(cmd.Context(), http.MethodPut, path(args[0], "/files"+q(args[1])), r, http.StatusOK)
			return err
		},
	}
	get := &cobra.Command{
		Use:   "get ID PATH",
		Short: "Write a file of the workspace to stdout",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			raw, err := c.do(cmd.Context(), http.MethodGet, path(args[0], "/files"+q(args[1])), nil, http.StatusOK)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(raw)
			return err
		},
	}
	ls := &cobra.Command{
		Use:   "ls ID [DIR]",
		Short: "List a directory of the workspace (default /home/user)",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			dir := ""
			if len(args) == 2 {
				dir = args[1]
			}
			raw, err := c.do(cmd.Context(), http.MethodGet, path(args[0], "/files/list"+q(dir)), nil, http.StatusOK)
			if err != nil {
				return err
			}
			var out struct {
				Entries []struct {
					Path, Type string
					Size       int64
				}
			}
			if err := json.Unmarshal(raw, &out); err != nil {
				return err
			}
			for _, e := range out.Entries {
				fmt.Fprintf(cmd.OutOrStdout(), "%-4s %10d %s\n", e.Type, e.Size, termSafe(e.Path))
			}
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm ID PATH",
		Short: "Remove a file, or a directory with what it holds",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := client()
			if err != nil {
				return err
			}
			_, err = c.do(cmd.Context(), http.MethodDelete, path(args[0], "/files"+q(args[1])), nil, http.StatusNoContent)
			return err
		},
	}
	files.AddCommand(put, get, ls, rm)
	return files
}
