package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/bundle"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/server"
	"github.com/spf13/cobra"
)

func init() { registerCommand(newDeployCmd) }

// Where moat deploy finds its server and key when no flag says.
const (
	envServer = "MOAT_SERVER"
	envAPIKey = "MOAT_API_KEY"
)

// maxDeployResponse bounds what moat deploy reads of the server's answer
// (a module's description or a problem).
const maxDeployResponse = 1 << 20

func newDeployCmd(g *globalFlags) *cobra.Command {
	var serverURL, keyFile string
	var timeout time.Duration
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "deploy DIR",
		Short: "Upload a plugin to a moat server (building it first when its module is missing or stale)",
		Long: `Deploy uploads the plugin in DIR to a running moat serve, as its new
version: POST /v1/modules, the upload the API documents, so nothing here is
private to the CLI.

A compiled plugin (Go, Rust, C, C++, AssemblyScript) is built first when
its module is missing or older than a source, as moat run does, and sent
as its module, moat.yaml and signature (the .minisig beside the module,
when moat sign wrote one). An interpreted plugin (JavaScript, Python) or a
native one is sent as an archive of moat.yaml, its sources and its
signature (NAME.minisig), the files moat sign covers, so the server
computes the same digest and checks the same signature.

The server is --server, else $MOAT_SERVER, else http://127.0.0.1:8080;
the API key is read from --key-file, else $MOAT_API_KEY (never an
argument: arguments are visible to every user of the machine). The key's
organization owns the module; its roles must allow uploads. A plain
http:// URL is refused for a server other than this machine: the key would
cross the network in clear.`,
		Example: `  KEY=$(moat keys create --org acme --user ann --role admin)
  MOAT_API_KEY=$KEY moat deploy hello
  moat deploy hello --server https://moat.example.com --key-file ~/.config/moat/key
  moat sign hello --key release.key && MOAT_API_KEY=$KEY moat deploy hello`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			base, err := deployServer(serverURL)
			if err != nil {
				return err
			}
			key, err := deployKey(keyFile)
			if err != nil {
				return err
			}
			dir := args[0]
			if _, err := buildIfStale(cmd.Context(), g, dir); err != nil {
				return err
			}
			body, contentType, signed, err := deployBody(dir)
			if err != nil {
				return usagef("%v", err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			m, err := deployUpload(ctx, base, key, contentType, body)
			if err != nil {
				return err
			}
			if jsonOut {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(m)
			}
			signer := "unsigned"
			switch {
			case m.Signer != "":
				signer = "signed by " + m.Signer
			case signed:
				signer = "signature sent, but the server's profile trusts no key of it"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deployed %s (%s, %s, sha256:%s) to %s for org %s\n",
				termSafe(m.Name), m.Kind, termSafe(signer), m.Digest[:min(12, len(m.Digest))], base, termSafe(m.Org))
			for _, a := range m.Actions {
				fmt.Fprintf(cmd.OutOrStdout(), "  curl -H \"Authorization: Bearer $MOAT_API_KEY\" --data INPUT %s/v1/modules/%s/actions/%s\n",
					base, url.PathEscape(m.Name), url.PathEscape(a.Name))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&serverURL, "server", "", "the moat server's URL (default $"+envServer+", else http://127.0.0.1:8080)")
	cmd.Flags().StringVar(&keyFile, "key-file", "", "a file holding the API key (default $"+envAPIKey+")")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "limit of the upload (the server compiles the module before it answers)")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the server's description of the module (GET /v1/modules/{name}'s JSON)")
	return cmd
}

// deployServer resolves the server's base URL and refuses plain HTTP to
// another machine.
func deployServer(flag string) (string, error) {
	raw := flag
	if raw == "" {
		raw = os.Getenv(envServer)
	}
	if raw == "" {
		raw = "http://127.0.0.1:8080"
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return "", usagef("--server %q: give the server's base URL, http(s)://HOST[:PORT], with no user info", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", usagef("--server %q: give the base URL alone, without a query or fragment", raw)
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return "", usagef("--server %s: plain http to another machine would send the API key in clear; use https://", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// deployKey reads the API key from the file given, else the environment.
func deployKey(file string) (string, error) {
	key := os.Getenv(envAPIKey)
	from := "$" + envAPIKey
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usagef("--key-file: %v", err)
		}
		key, from = string(b), "--key-file "+file
	}
	key = strings.TrimSpace(key)
	switch {
	case key == "":
		return "", usagef("no API key: set $%s or pass --key-file FILE (create one with `moat keys create --org ORG --user USER --role admin`)", envAPIKey)
	case strings.ContainsAny(key, " \t\r\n") || len(key) > 512:
		return "", usagef("%s does not hold an API key (one line, as moat keys create prints it)", from)
	}
	return key, nil
}

// deployBody is the upload of the plugin in dir (bundle.Bundle.Archive: a
// multipart form for a module, an archive of its files for an interpreted
// or native plugin); signed says whether a signature goes with it.
func deployBody(dir string) (body []byte, contentType string, signed bool, err error) {
	b, err := bundle.Open(dir)
	if err != nil {
		return nil, "", false, err
	}
	body, contentType, err = b.Archive()
	return body, contentType, b.Signature != nil, err
}

// deployUpload posts the upload and reads the module's description, or
// turns the server's problem into an error carrying its code (so the exit
// status is the same as for the same refusal in moat run).
func deployUpload(ctx context.Context, base, key, contentType string, body []byte) (*server.ModuleJSON, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/modules", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", contentType)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true},
		// A redirect would carry the key to wherever it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("deploy: %w (is moat serve running at %s? --server or $%s names another)", err, base, envServer)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxDeployResponse))
	if err != nil {
		return nil, fmt.Errorf("deploy: reading the answer: %w", err)
	}
	if res.StatusCode != http.StatusCreated {
		var p server.Problem
		if json.Unmarshal(raw, &p) != nil || p.Title == "" {
			return nil, fmt.Errorf("deploy: %s answered %s: %s", base, res.Status, oneLineString(string(raw)))
		}
		reason := p.Title
		if p.Detail != "" {
			reason = p.Detail
		}
		if res.StatusCode == http.StatusUnauthorized {
			reason += fmt.Sprintf(" (the key is not one %s knows: create it with the server's --config, `moat keys create --config FILE`)", base)
		}
		return nil, &host.Error{Module: p.Module, Code: abi.Code(p.Code), Reason: fmt.Sprintf("deploy: %s: %s", res.Status, reason)}
	}
	var m server.ModuleJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("deploy: %s answered 201 with a body that is not a module: %w", base, err)
	}
	return &m, nil
}
