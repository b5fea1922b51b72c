package main_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/moat-sandbox/moat/host/server"
)

// TestOneNaming: what the CLI prints as JSON names its fields as the HTTP
// API does. moat exec --lang --json is POST /v1/runs's RunResult (decoded
// strictly: no field of another name), moat audit --json is /v1/audit's
// events, and moat audit takes --correlation-id as moat run does.
func TestOneNaming(t *testing.T) {
	data := t.TempDir()
	r := moat(t, "", "exec", "--data", data, "--lang", "javascript", "-e", `print("hi")`, "--json")
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	var res server.RunResult
	if err := dec.Decode(&res); err != nil || r.code != 0 || res.Stdout != "hi\n" || res.CorrelationID == "" || res.RunTimeMS <= 0 {
		t.Fatalf("exec --json is not a RunResult: %v, %+v\n%s", err, res, r.stdout)
	}
	a := moat(t, "", "audit", "--data", data, "--correlation-id", res.CorrelationID, "--json")
	dec = json.NewDecoder(bytes.NewReader([]byte(a.stdout)))
	dec.DisallowUnknownFields()
	var ev server.AuditEventJSON
	if err := dec.Decode(&ev); err != nil || a.code != 0 || ev.CorrelationID != res.CorrelationID || ev.Kind == "" {
		t.Fatalf("audit --json is not /v1/audit's event: %v, %+v\n%s", err, ev, a.stdout)
	}
}
