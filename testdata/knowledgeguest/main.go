// Command knowledgeguest is a test fixture: a moat plugin that uses the
// Go guest SDK's knowledge wrappers (moat.Knowledge). Build it with:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o knowledgeguest.wasm ./testdata/knowledgeguest
//
// Its one action, kb, runs the command its input holds as JSON and
// answers with the result as JSON:
//
//	{"op":"add","collection":C,"id":I,"text":T,"meta":{...}}  -> {"replaced":bool}
//	{"op":"delete","collection":C,"id":I}                    -> {"deleted":bool}
//	{"op":"search","collection":C,"query":Q,"limit":N,"filter":{...}} -> [hits]
//
// An op's error fails the action with the op's code.
package main

import (
	"encoding/json"

	"github.com/moat-sandbox/moat/abi"
	moat "github.com/moat-sandbox/moat/guests/go"
)

type command struct {
	Op         string         `json:"op"`
	Collection string         `json:"collection"`
	ID         string         `json:"id"`
	Text       string         `json:"text"`
	Meta       map[string]any `json:"meta"`
	Query      string         `json:"query"`
	Limit      int            `json:"limit"`
	Filter     map[string]any `json:"filter"`
}

func init() {
	moat.Action("kb", func(in []byte) ([]byte, error) {
		var c command
		if err := json.Unmarshal(in, &c); err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "kb: input is not a command: %v", err)
		}
		var out any
		var err error
		switch c.Op {
		case "add":
			var replaced bool
			replaced, err = moat.Knowledge.Add(c.Collection, c.ID, c.Text, c.Meta)
			out = map[string]bool{"replaced": replaced}
		case "delete":
			var deleted bool
			deleted, err = moat.Knowledge.Delete(c.Collection, c.ID)
			out = map[string]bool{"deleted": deleted}
		case "search":
			out, err = moat.Knowledge.Search(c.Collection, c.Query, moat.SearchOptions{Limit: c.Limit, Filter: c.Filter})
		default:
			return nil, abi.Errorf(abi.CodeInvalidArgument, "kb: op %q is none of add, delete, search", c.Op)
		}
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	})
}

func main() {}
