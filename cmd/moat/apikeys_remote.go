package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// keysRemote is `moat keys` against a running server (--server): the
// same operations over its /v1/keys, as the holder of $MOAT_API_KEY (or
// --key-file), so the server's own checks apply — the permission
// key.manage, no key wider than the caller's — and each is audited there.
type keysRemote struct {
	base, key string
}

// remoteKeys returns the server to manage keys on, or nil to open the
// store (no --server).
func remoteKeys(serverFlag, keyFile string) (*keysRemote, error) {
	if serverFlag == "" {
		return nil, nil
	}
	base, err := deployServer(serverFlag)
	if err != nil {
		return nil, err
	}
	key, err := deployKey(keyFile)
	if err != nil {
		return nil, err
	}
	return &keysRemote{base: base, key: key}, nil
}

// maxKeysResponse bounds what the CLI reads of an answer.
const maxKeysResponse = 4 << 20

// do sends one request and decodes a 2xx answer into out; a problem is a
// usage error carrying the server's detail.
func (r *keysRemote) do(cmd *cobra.Command, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(cmd.Context(), method, r.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+r.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }} // a redirect would carry the key
	res, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("keys: %w (is moat serve running at %s?)", err, r.base)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxKeysResponse))
	if err != nil {
		return fmt.Errorf("keys: reading the answer: %w", err)
	}
	if res.StatusCode/100 != 2 {
		var p struct{ Detail string }
		if json.Unmarshal(raw, &p) == nil && p.Detail != "" {
			return usagef("%s %s: %d: %s", method, path, res.StatusCode, termSafe(p.Detail))
		}
		return usagef("%s %s: %d", method, path, res.StatusCode)
	}
	if out != nil && len(raw) > 0 {
		return json.Unmarshal(raw, out)
	}
	return nil
}

type remoteKey struct {
	ID           string     `json:"id"`
	Org          string     `json:"org"`
	User         string     `json:"user"`
	Roles        []string   `json:"roles"`
	Scopes       []string   `json:"scopes"`
	Name         string     `json:"name"`
	CreatedAt    time.Time  `json:"created_at"`
	ExpiresAt    *time.Time `json:"expires_at"`
	LastUsedAt   *time.Time `json:"last_used_at"`
	LastUsedAddr string     `json:"last_used_addr"`
	Status       string     `json:"status"`
	Key          string     `json:"key"`
}

func (r *keysRemote) create(cmd *cobra.Command, org, user string, roles, scopes []string, name string, expires time.Duration) error {
	body := map[string]any{"name": name}
	if user != "" {
		body["user"] = user
	}
	if roles != nil {
		body["roles"] = roles
	}
	if scopes != nil {
		body["scopes"] = scopes
	}
	if expires > 0 {
		body["expires_in_seconds"] = int64(expires.Seconds())
	}
	var k remoteKey
	if err := r.do(cmd, http.MethodPost, "/v1/keys", body, &k); err != nil {
		return err
	}
	if org != "" && k.Org != org {
		// The server creates keys in the caller's organization only.
		_ = r.do(cmd, http.MethodDelete, "/v1/keys/"+k.ID, nil, nil)
		return usagef("--org %s: a key over the API is created in the organization of the key that asks (%s); drop --org or use a key of %s", org, k.Org, org)
	}
	fmt.Fprintln(cmd.OutOrStdout(), k.Key)
	fmt.Fprintf(cmd.ErrOrStderr(), "created %s for %s@%s%s on %s; the key above is shown only now: keep it\n",
		k.ID, termSafe(k.User), termSafe(k.Org), rolesNote(k.Roles), r.base)
	return nil
}

func (r *keysRemote) list(cmd *cobra.Command) error {
	var out struct {
		Keys []remoteKey `json:"keys"`
	}
	if err := r.do(cmd, http.MethodGet, "/v1/keys", nil, &out); err != nil {
		return err
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tORG\tUSER\tROLES\tSCOPES\tNAME\tCREATED\tSTATUS\tLAST USED")
	for _, k := range out.Keys {
		scopes, used, status := "all", "never", k.Status
		if len(k.Scopes) > 0 {
			scopes = strings.Join(k.Scopes, ",")
		}
		if k.LastUsedAt != nil {
			used = k.LastUsedAt.Local().Format(time.DateTime) + " " + k.LastUsedAddr
		}
		if k.ExpiresAt != nil && status == "active" {
			status = "expires " + k.ExpiresAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termSafe(k.ID), termSafe(k.Org), termSafe(k.User), termSafe(strings.Join(k.Roles, ",")),
			termSafe(scopes), termSafe(k.Name), k.CreatedAt.Local().Format(time.DateTime), termSafe(status), termSafe(used))
	}
	return w.Flush()
}

func (r *keysRemote) revoke(cmd *cobra.Command, id string) error {
	if err := r.do(cmd, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "revoked %s; every server refuses it within a second\n", termSafe(id))
	return nil
}

func (r *keysRemote) rotate(cmd *cobra.Command, id string, grace time.Duration) error {
	var k remoteKey
	if err := r.do(cmd, http.MethodPost, "/v1/keys/"+url.PathEscape(id)+"/rotate", map[string]any{"grace_seconds": int64(grace.Seconds())}, &k); err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), k.Key)
	fmt.Fprintf(cmd.ErrOrStderr(), "rotated %s; the key above is shown only now: keep it\n", termSafe(k.ID))
	return nil
}
