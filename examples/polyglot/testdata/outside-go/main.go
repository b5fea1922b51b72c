// Command outside-go is the Go SDK's fixture of the http, media and ai
// wrappers, with the same commands as every language's outside-*
// fixture, driven by examples/polyglot's TestSDKOutside:
//
//	http   POST the URL in the input with the header X-Test: sdk and the
//	       body 00 ff 68 69 → {"status","url","echo" (X-Echo),"body" (hex)}
//	media  keep the input's bytes as image/png (or, for "fetch URL", have
//	       the host fetch the URL), a 16x16 cover thumbnail of it, the
//	       thumbnail described, the item read back →
//	       {"item","thumb","info","got":{"id","len","head" (hex of 8 bytes)}}
//	ai     "complete MODEL PROMPT" (a system and a user message, 64 tokens,
//	       temperature 0.25), "json MODEL PROMPT" (a schema, nothing else)
//	       → {"text","input_tokens","output_tokens","model_call_id"};
//	       "embed MODEL TEXT" (TEXT and "moat") → {"vectors",...}
//	caller who the invocation runs for (moat.caller), whatever the input
//	       says → {"user","org","roles","correlation_id","admin" (holds
//	       the role admin)}
//
// An op's error fails the action with the op's code.
package main

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	moat "github.com/moat-sandbox/moat/guests/go"
)

func main() {}

func init() {
	moat.Action("http", fetch)
	moat.Action("media", media)
	moat.Action("ai", ai)
	moat.Action("caller", caller)
}

func caller([]byte) ([]byte, error) {
	p, err := moat.Caller()
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"user": p.User, "org": p.Org, "roles": p.Roles, "correlation_id": p.CorrelationID, "admin": p.HasRole("admin")})
}

func fetch(in []byte) ([]byte, error) {
	resp, err := moat.HTTP.Fetch(moat.HTTPRequest{Method: "POST", URL: string(in), Headers: map[string]string{"X-Test": "sdk"},
		Body: []byte{0, 0xff, 'h', 'i'}, Timeout: 5 * time.Second, MaxBytes: 65536})
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"status": resp.Status, "url": resp.URL, "echo": resp.Header("X-Echo"), "body": hex.EncodeToString(resp.Body)})
}

func media(in []byte) ([]byte, error) {
	var item abi.MediaInfo
	var err error
	if url, ok := strings.CutPrefix(string(in), "fetch "); ok {
		item, err = moat.Media.Fetch(url)
	} else {
		item, err = moat.Media.Put(in, "image/png")
	}
	if err != nil {
		return nil, err
	}
	thumb, err := moat.Media.Thumbnail(item.ID, 16, 16, abi.FitCover)
	if err != nil {
		return nil, err
	}
	info, err := moat.Media.Info(thumb.ID)
	if err != nil {
		return nil, err
	}
	got, data, err := moat.Media.Get(item.ID)
	if err != nil {
		return nil, err
	}
	head := data[:min(8, len(data))]
	return json.Marshal(map[string]any{"item": item, "thumb": thumb, "info": info,
		"got": map[string]any{"id": got.ID, "len": len(data), "head": hex.EncodeToString(head)}})
}

func ai(in []byte) ([]byte, error) {
	a := strings.SplitN(string(in), " ", 3)
	if len(a) != 3 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "want CMD MODEL TEXT, not %q", in)
	}
	cmd, model, text := a[0], a[1], a[2]
	var out map[string]any
	var usage abi.AIUsage
	var id string
	switch cmd {
	case "complete", "json":
		msgs := []abi.AIMessage{moat.SystemMessage("Answer briefly."), moat.UserMessage(text)}
		temp := 0.25
		opts := moat.CompleteOptions{MaxTokens: 64, Temperature: &temp}
		if cmd == "json" {
			msgs = msgs[1:]
			opts = moat.CompleteOptions{JSONSchema: map[string]any{"type": "object",
				"properties": map[string]any{"answer": map[string]string{"type": "string"}}, "required": []string{"answer"}}}
		}
		c, err := moat.AI.Complete(model, msgs, opts)
		if err != nil {
			return nil, err
		}
		out, usage, id = map[string]any{"text": c.Text}, c.Usage, c.ModelCallID
	case "embed":
		e, err := moat.AI.Embed(model, []string{text, "moat"})
		if err != nil {
			return nil, err
		}
		out, usage, id = map[string]any{"vectors": e.Vectors}, e.Usage, e.ModelCallID
	default:
		return nil, abi.Errorf(abi.CodeInvalidArgument, "unknown ai command %q", cmd)
	}
	out["input_tokens"], out["output_tokens"], out["model_call_id"] = usage.InputTokens, usage.OutputTokens, id
	return json.Marshal(out)
}
