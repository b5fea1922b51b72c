// Command http-go is a moat plugin that calls an HTTP API through the
// host: its action get sends GET to the URL in its input with http.fetch
// and returns the status and the body. The plugin never holds the API's
// credential: the operator's profile grants the URL and injects the
// credential (a secret) into the request, and the host scrubs it from the
// reply. See README.md.
package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/moat-sandbox/moat/abi"
	moat "github.com/moat-sandbox/moat/guests/go"
)

func init() {
	moat.Action("get", get)
	moat.Action("on_push", onPush)
}

// onPush receives GitHub's push webhook through the route POST
// /hooks/github of moat.yaml: moat serve checked its signature under the
// organization's secret github-hook (and refused a replay) before this
// runs, as the service user with the role webhook.
func onPush(input []byte) ([]byte, error) {
	req, err := moat.Request(input)
	if err != nil {
		return nil, err
	}
	var push struct {
		Ref        string `json:"ref"`
		Repository struct {
			FullName string `json:"full_name"`
		} `json:"repository"`
	}
	body, err := req.Bytes()
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &push); err != nil {
		return moat.JSON(400, map[string]string{"error": "the body is not a GitHub event"})
	}
	moat.Log.Info("webhook", "event", req.Header("X-GitHub-Event"), "repository", push.Repository.FullName, "ref", push.Ref)
	return moat.JSON(200, map[string]string{"event": req.Header("X-GitHub-Event"), "repository": push.Repository.FullName})
}

func get(input []byte) ([]byte, error) {
	url := strings.TrimSpace(string(input))
	if url == "" {
		return nil, fmt.Errorf("give the URL to fetch as the input")
	}
	var resp abi.HTTPFetchResponse
	req := abi.HTTPFetchRequest{URL: url, Headers: map[string]string{"Accept": "application/json"}, TimeoutMS: 5000, MaxBytes: 64 << 10}
	if err := moat.Call(abi.OpHTTPFetch, req, &resp); err != nil {
		return nil, err // denied, too_large, timeout, ...: the code survives
	}
	return fmt.Appendf(nil, "%d %s", resp.Status, resp.Body), nil
}

// main never runs in a plugin built with -buildmode=c-shared; the Go
// toolchain still requires it in package main.
func main() {}
