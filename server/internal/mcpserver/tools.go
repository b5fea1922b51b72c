package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// anyObject is the input schema of an action that declares none: its
// arguments are sent as the action's JSON input, whatever they hold.
var anyObject = json.RawMessage(`{"type":"object"}`)

// toolSchema is the MCP form of an action's schema. MCP's tool schemas
// are objects; an action whose input is another JSON value (a string, a
// list) takes it as the argument "input". ok is false for an output
// schema that is not an object, which MCP cannot declare (the output is
// still checked by the host, and returned as text).
func toolSchema(raw json.RawMessage) (schema json.RawMessage, wrapped, ok bool) {
	if len(raw) == 0 {
		return anyObject, false, true
	}
	var probe struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(raw, &probe) == nil && probe.Type == "object" {
		return raw, false, true
	}
	w, err := json.Marshal(map[string]any{"type": "object", "properties": map[string]json.RawMessage{"input": raw}, "required": []string{"input"}})
	if err != nil {
		return anyObject, false, false
	}
	return w, true, false
}

// preview is the start of an input, for a person asked to confirm it.
func preview(b []byte) string {
	const n = 512
	s := strings.ToValidUTF8(string(b), "?")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// addAction adds module.action as a tool. Its handler posts the
// arguments to the action, as POST /v1/modules/{module}/actions/{action}
// would with the same key: the host validates them against the input
// schema, checks the roles and asks for a confirmation when the manifest
// or a sensitive op says so.
func (c *caller) addAction(s *mcp.Server, mod string, a action, ui string) {
	name := mod + "." + a.Name
	in, wrapped, _ := toolSchema(a.InputSchema)
	desc := a.Description
	if desc == "" {
		desc = fmt.Sprintf("Runs the action %s of the moat module %s.", a.Name, mod)
	}
	if a.Confirm {
		desc += " A person must confirm each call."
	}
	tool := &mcp.Tool{Name: name, Description: desc, InputSchema: in,
		Annotations: &mcp.ToolAnnotations{Title: name, DestructiveHint: ptr(a.Confirm), OpenWorldHint: ptr(true)},
		Meta:        mcp.Meta{"moat/confirm": a.Confirm}}
	if ui != "" {
		// MCP Apps: the module's page shows this tool's results in a host
		// that renders apps (a resource the principal may open: addPages).
		tool.Meta["ui"] = map[string]any{"resourceUri": ui}
	}
	structured := false
	if out, _, ok := toolSchema(a.OutputSchema); ok && len(a.OutputSchema) > 0 {
		tool.OutputSchema, structured = out, true
	}
	path := "/v1/modules/" + escape(mod) + "/actions/" + escape(a.Name)
	s.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		client := clientName(req)
		if req.Params.RequestState != "" || len(req.Params.InputResponses) > 0 {
			return c.confirmed(ctx, req, client, name, structured)
		}
		body := []byte(req.Params.Arguments)
		if len(body) == 0 || string(body) == "null" {
			body = []byte("{}")
		}
		if wrapped {
			var args struct {
				Input json.RawMessage `json:"input"`
			}
			if err := objectArgs(body, &args); err != nil || len(args.Input) == 0 {
				return toolError("%s takes its input as the argument \"input\"", name), nil
			}
			body = args.Input
		}
		stop := c.progress(ctx, req, name)
		ans, err := c.do(ctx, http.MethodPost, path, body, client, name)
		stop()
		if err != nil {
			return nil, err
		}
		if ans.status == http.StatusPreconditionRequired {
			return c.askConfirmation(req, ans, name, body)
		}
		return actionResult(ans, structured), nil
	})
}

// actionResult is an action's answer as a tool result: the output as
// text (and as structured content when the action declares an object
// output schema), or the API's problem as a tool error the model reads.
func actionResult(ans *answer, structured bool) *mcp.CallToolResult {
	if ans.status != http.StatusOK {
		return toolError("%v", ans.err())
	}
	res := textResult(preview2(ans.body))
	if structured {
		var v map[string]any
		if json.Unmarshal(ans.body, &v) == nil {
			res.StructuredContent = v
		}
	}
	return res
}

// preview2 is an output as text: UTF-8 as it is, bytes as a note.
func preview2(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return fmt.Sprintf("(%d bytes of binary output)", len(b))
}

// confirmID names the one input request of a confirmation.
const confirmID = "moat-confirm"

// askConfirmation answers a call that needs a person's confirmation with
// an elicitation naming what will run; the confirmation token rides in the
// request state, so the retry (on any replica) confirms exactly the
// pending request the host stored — bound to the module's code, the input
// and the principal — and nothing the retry's arguments say.
func (c *caller) askConfirmation(req *mcp.CallToolRequest, ans *answer, name string, input []byte) (*mcp.CallToolResult, error) {
	p := ans.problem()
	if p.Confirmation == nil || p.Confirmation.Token == "" {
		return toolError("%v", ans.err()), nil
	}
	ip := req.Session.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return toolError("%s needs a person's confirmation (%s), and this MCP client cannot ask its person (it declares no elicitation); "+
			"use a client that supports elicitation, or `moat mcp` on stdio", name, p.Confirmation.Summary), nil
	}
	msg := fmt.Sprintf("moat asks you to confirm: %s.\nInput: %s\nAccept to run it once, as you.", p.Confirmation.Summary, preview(input))
	return &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{confirmID: &mcp.ElicitParams{Mode: "form", Message: msg,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}}}},
		RequestState: p.Confirmation.Token,
	}, nil
}

// confirmed handles the retry after the elicitation: an accept confirms
// the pending request (POST /v1/confirmations/{token}, which refuses a
// token of another principal, a used or expired one, or one whose module
// changed since); anything else leaves it unconfirmed.
func (c *caller) confirmed(ctx context.Context, req *mcp.CallToolRequest, client, name string, structured bool) (*mcp.CallToolResult, error) {
	r, ok := req.Params.InputResponses[confirmID].(*mcp.ElicitResult)
	if !ok || req.Params.RequestState == "" {
		return toolError("%s: the retry carries no answer to the confirmation; call the tool again", name), nil
	}
	if r.Action != "accept" {
		return toolError("%s was not run: the person answered %q to the confirmation", name, r.Action), nil
	}
	ans, err := c.do(ctx, http.MethodPost, "/v1/confirmations/"+escape(req.Params.RequestState), []byte{}, client, name)
	if err != nil {
		return nil, err
	}
	return actionResult(ans, structured), nil
}

// runCodeArgs are run_code's arguments.
type runCodeArgs struct {
	Language string `json:"language"`
	Version  string `json:"version,omitempty"`
	Code     string `json:"code"`
	Stdin    string `json:"stdin,omitempty"`
}

var runCodeSchema = json.RawMessage(`{"type":"object","properties":{` +
	`"language":{"type":"string","description":"a language moat runs, as GET /v1/languages names it: python, javascript, go, rust, c, ruby..."},` +
	`"version":{"type":"string","description":"the language's version; the default one when left out"},` +
	`"code":{"type":"string","description":"the program's source, one file"},` +
	`"stdin":{"type":"string","description":"the program's standard input"}},` +
	`"required":["language","code"],"additionalProperties":false}`)

// addRunCode adds run_code: POST /v1/runs with one source file, within
// the limits the caller's profile gives jobs.
func (c *caller) addRunCode(s *mcp.Server) {
	s.AddTool(&mcp.Tool{Name: "run_code", InputSchema: runCodeSchema,
		Description: "Runs a program once in a fresh sandbox (no network, limits from the operator's profile) and returns its status, stdout and stderr.",
		Annotations: &mcp.ToolAnnotations{Title: "Run code", OpenWorldHint: ptr(false), DestructiveHint: ptr(false)}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args runCodeArgs
			if err := objectArgs(req.Params.Arguments, &args); err != nil {
				return toolError("run_code: %v", err), nil
			}
			client := clientName(req)
			ext, err := c.extension(ctx, args.Language, client)
			if err != nil {
				return toolError("run_code: %v", err), nil
			}
			body, err := json.Marshal(map[string]any{"language": args.Language, "version": args.Version, "stdin": args.Stdin,
				"files": []map[string]string{{"name": "main" + ext, "content": args.Code}}})
			if err != nil {
				return nil, err
			}
			stop := c.progress(ctx, req, "run_code")
			ans, err := c.do(ctx, http.MethodPost, "/v1/runs", body, client, "run_code")
			stop()
			if err != nil {
				return nil, err
			}
			return jsonResult(ans), nil
		})
}

// extension is the file extension of a language (or alias) the server runs.
func (c *caller) extension(ctx context.Context, lang, client string) (string, error) {
	if c.languages == nil {
		ans, err := c.do(ctx, http.MethodGet, "/v1/languages", nil, client, "")
		if err != nil {
			return "", err
		}
		if ans.status != http.StatusOK {
			return "", ans.err()
		}
		var list struct {
			Languages []language `json:"languages"`
		}
		if err := json.Unmarshal(ans.body, &list); err != nil {
			return "", err
		}
		c.languages = list.Languages
	}
	var names []string
	for _, l := range c.languages {
		names = append(names, l.Name)
		if l.Name == lang || contains(l.Aliases, lang) {
			if len(l.Extensions) > 0 {
				return l.Extensions[0], nil
			}
			return "", nil
		}
	}
	return "", fmt.Errorf("language %q is not one this server runs; use one of %s", lang, strings.Join(names, ", "))
}

// language is an entry of GET /v1/languages.
type language struct {
	Name       string   `json:"name"`
	Aliases    []string `json:"aliases"`
	Extensions []string `json:"extensions"`
}

func contains(l []string, s string) bool {
	for _, e := range l {
		if e == s {
			return true
		}
	}
	return false
}

// jsonResult is a JSON answer as a tool result: the JSON as text and as
// structured content, or the problem as a tool error.
func jsonResult(ans *answer) *mcp.CallToolResult {
	if ans.status/100 != 2 {
		return toolError("%v", ans.err())
	}
	if len(bytes.TrimSpace(ans.body)) == 0 {
		return textResult("done")
	}
	res := textResult(preview2(ans.body))
	var v map[string]any
	if json.Unmarshal(ans.body, &v) == nil {
		res.StructuredContent = v
	}
	return res
}

// sessionTool is one of the session tools: its arguments, and the API
// request they make.
type sessionTool struct {
	name, title, desc string
	schema            string
	mutates           bool
	request           func(args map[string]any) (method, path string, body []byte, err error)
}

func str(args map[string]any, k string) string {
	s, _ := args[k].(string)
	return s
}

var sessionTools = []sessionTool{
	{name: "session_create", title: "Create a session", mutates: true,
		desc:   "Creates a session: a sandbox that keeps files (under /home/user) and code contexts whose variables persist between session_run calls, until it is killed or times out. Returns its id.",
		schema: `{"type":"object","properties":{"timeout":{"type":"integer","minimum":0,"description":"seconds the session lives; the server's default when 0"}},"additionalProperties":false}`,
		request: func(args map[string]any) (string, string, []byte, error) {
			b, err := json.Marshal(args)
			return http.MethodPost, "/v1/sessions", b, err
		}},
	{name: "session_run", title: "Run code in a session", mutates: true,
		desc:   "Runs code in a session's context of that language; variables persist between runs of the same context.",
		schema: `{"type":"object","properties":{"session_id":{"type":"string"},"language":{"type":"string"},"code":{"type":"string"},"context":{"type":"string","description":"a context id; the language's default context when left out"}},"required":["session_id","language","code"],"additionalProperties":false}`,
		request: func(args map[string]any) (string, string, []byte, error) {
			b, err := json.Marshal(map[string]any{"language": args["language"], "code": args["code"], "context": args["context"]})
			return http.MethodPost, "/v1/sessions/" + escape(str(args, "session_id")) + "/run", b, err
		}},
	{name: "session_write_file", title: "Write a file in a session", mutates: true,
		desc:   "Writes a text file in a session's workspace.",
		schema: `{"type":"object","properties":{"session_id":{"type":"string"},"path":{"type":"string"},"content":{"type":"string"}},"required":["session_id","path","content"],"additionalProperties":false}`,
		request: func(args map[string]any) (string, string, []byte, error) {
			return http.MethodPut, "/v1/sessions/" + escape(str(args, "session_id")) + "/files?path=" + queryEscape(str(args, "path")), []byte(str(args, "content")), nil
		}},
	{name: "session_read_file", title: "Read a file of a session",
		desc:   "Reads a file of a session's workspace (text; binary files are described, not returned).",
		schema: `{"type":"object","properties":{"session_id":{"type":"string"},"path":{"type":"string"}},"required":["session_id","path"],"additionalProperties":false}`,
		request: func(args map[string]any) (string, string, []byte, error) {
			return http.MethodGet, "/v1/sessions/" + escape(str(args, "session_id")) + "/files?path=" + queryEscape(str(args, "path")), nil, nil
		}},
	{name: "session_list_files", title: "List a session's files",
		desc:   "Lists a directory of a session's workspace.",
		schema: `{"type":"object","properties":{"session_id":{"type":"string"},"path":{"type":"string","description":"the directory; the workspace when left out"}},"required":["session_id"],"additionalProperties":false}`,
		request: func(args map[string]any) (string, string, []byte, error) {
			return http.MethodGet, "/v1/sessions/" + escape(str(args, "session_id")) + "/files/list?path=" + queryEscape(str(args, "path")), nil, nil
		}},
	{name: "session_fork", title: "Fork a session", mutates: true,
		desc:   "Copies a session: a new session with the same files and code contexts (their variables as they are now), which then goes its own way. Returns the new session (sessions[0].id).",
		schema: `{"type":"object","properties":{"session_id":{"type":"string"}},"required":["session_id"],"additionalProperties":false}`,
		request: func(args map[string]any) (string, string, []byte, error) {
			return http.MethodPost, "/v1/sessions/" + escape(str(args, "session_id")) + "/fork", []byte("{}"), nil
		}},
	{name: "session_kill", title: "Kill a session", mutates: true,
		desc:   "Ends a session and deletes its workspace.",
		schema: `{"type":"object","properties":{"session_id":{"type":"string"}},"required":["session_id"],"additionalProperties":false}`,
		request: func(args map[string]any) (string, string, []byte, error) {
			return http.MethodDelete, "/v1/sessions/" + escape(str(args, "session_id")), nil, nil
		}},
}

// addSessionTools adds the session tools: each one request to
// /v1/sessions, whose sessions are the key's user's and organization's.
func (c *caller) addSessionTools(s *mcp.Server) {
	for _, t := range sessionTools {
		s.AddTool(&mcp.Tool{Name: t.name, Description: t.desc, InputSchema: json.RawMessage(t.schema),
			Annotations: &mcp.ToolAnnotations{Title: t.title, ReadOnlyHint: !t.mutates, DestructiveHint: ptr(t.name == "session_kill"), OpenWorldHint: ptr(false)}},
			func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				var args map[string]any
				if err := objectArgs(req.Params.Arguments, &args); err != nil {
					return toolError("%s: %v", t.name, err), nil
				}
				for _, k := range []string{"session_id", "path", "content", "language", "code", "context"} {
					if v, ok := args[k]; ok {
						if _, isStr := v.(string); !isStr {
							return toolError("%s: %s must be a string", t.name, k), nil
						}
					}
				}
				if id, ok := args["session_id"]; ok && id == "" {
					return toolError("%s: session_id is empty; session_create returns one", t.name), nil
				}
				method, path, body, err := t.request(args)
				if err != nil {
					return toolError("%s: %v", t.name, err), nil
				}
				stop := c.progress(ctx, req, t.name)
				ans, err := c.do(ctx, method, path, body, clientName(req), t.name)
				stop()
				if err != nil {
					return nil, err
				}
				if t.name == "session_read_file" && ans.status == http.StatusOK {
					return textResult(preview2(ans.body)), nil
				}
				return jsonResult(ans), nil
			})
	}
}

// addTaskTool adds task_status: GET /v1/tasks/{id}, scoped as that route
// is (the key's organization, and its user unless the key may read every
// task), so an agent can follow a task an action enqueued. The go-sdk
// v1.8.0 has no MCP tasks extension (SEP-2663); this is the documented
// poll tool in its place.
func (c *caller) addTaskTool(s *mcp.Server) {
	s.AddTool(&mcp.Tool{Name: "task_status", InputSchema: json.RawMessage(`{"type":"object","properties":{"task_id":{"type":"string","description":"the id of a task an action enqueued (its output names it)"}},"required":["task_id"],"additionalProperties":false}`),
		Description: "Reports a background task's state, attempts and result, as GET /v1/tasks/{id} does. Call it again until the task has finished.",
		Annotations: &mcp.ToolAnnotations{Title: "Task status", ReadOnlyHint: true, OpenWorldHint: ptr(false)}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct {
				TaskID string `json:"task_id"`
			}
			if err := objectArgs(req.Params.Arguments, &args); err != nil {
				return toolError("task_status: %v", err), nil
			}
			if args.TaskID == "" || len(args.TaskID) > 128 {
				return toolError("task_status: task_id must be a task's id (1 to 128 characters)"), nil
			}
			ans, err := c.do(ctx, http.MethodGet, "/v1/tasks/"+escape(args.TaskID), nil, clientName(req), "task_status")
			if err != nil {
				return nil, err
			}
			return jsonResult(ans), nil
		})
}

// progressEvery is how often a call still running says so.
const progressEvery = 5 * time.Second

// progress reports a call's progress to a client that asked for it (a
// progress token): "running" at once, then a beat every progressEvery
// (or half the event stream's write timeout, when that is shorter) until
// stop, so a client that resets its timeout on progress waits out a long
// action or run rather than giving up on it, and /mcp's stream outlives
// its write deadline.
func (c *caller) progress(ctx context.Context, req *mcp.CallToolRequest, what string) (stop func()) {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return func() {}
	}
	send := func(n float64, msg string) {
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: n, Message: msg})
	}
	send(0, "running "+what)
	done := make(chan struct{})
	go func() {
		every := progressEvery
		if c.writeTimeout > 0 && c.writeTimeout/2 < every {
			every = c.writeTimeout / 2
		}
		t := time.NewTicker(every)
		defer t.Stop()
		start := time.Now()
		for n := 1; ; n++ {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				send(float64(n), fmt.Sprintf("%s: still running after %s", what, time.Since(start).Round(time.Second)))
			}
		}
	}()
	return func() { close(done) }
}
