// Command dbguest is a test fixture: a moat plugin that drives the db
// family through the Go SDK's typed wrappers (moat.DB), used by the
// host's end-to-end tests. Build it with:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o dbguest.wasm ./testdata/dbguest
//
// Its one action, db, runs the command given as input and answers JSON:
//
//	insert MODEL DOC            -> {"id":ID,"version":1}
//	get MODEL ID                -> {"found":..,"version":..,"owner":..,"doc":..,"created":..}
//	query MODEL QUERY           -> {"ids":[..],"next":..}, QUERY being
//	                               {"where":[[f,op,v],..],"order":[..],"limit":n,"after":".."}
//	update MODEL ID CHANGE      -> {"version":n}, CHANGE being {"set":{..},"unset":[..],"version":n}
//	delete MODEL ID [VERSION]   -> {"deleted":..}
//	count MODEL [WHERE]         -> {"count":n}
//
// An op's error is returned as the action's, with its code.
package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	moat "github.com/moat-sandbox/moat/guests/go"
)

func init() { moat.Action("db", db) }

func main() {}

func db(in []byte) ([]byte, error) {
	parts := strings.SplitN(string(in), " ", 3)
	if len(parts) < 2 {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "want OP MODEL [ARG]")
	}
	op, model, arg := parts[0], parts[1], ""
	if len(parts) == 3 {
		arg = parts[2]
	}
	switch op {
	case "insert":
		id, v, err := moat.DB.Insert(model, json.RawMessage(arg))
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"id": id, "version": v})
	case "get":
		d, found, err := moat.DB.Get(model, arg)
		if err != nil {
			return nil, err
		}
		if !found {
			return []byte(`{"found":false}`), nil
		}
		var doc map[string]any
		if err := d.Decode(&doc); err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"found": true, "version": d.Version, "owner": d.Owner, "doc": doc,
			"created": d.Created.Format(time.RFC3339Nano)})
	case "query":
		var q struct {
			Where [][3]json.RawMessage `json:"where"`
			Order []string             `json:"order"`
			Limit int                  `json:"limit"`
			After string               `json:"after"`
		}
		if err := json.Unmarshal([]byte(arg), &q); err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "query: %v", err)
		}
		where, err := conds(q.Where)
		if err != nil {
			return nil, err
		}
		p, err := moat.DB.Query(model, moat.Query{Where: where, Order: q.Order, Limit: q.Limit, After: q.After})
		if err != nil {
			return nil, err
		}
		ids := []string{}
		for _, d := range p.Docs {
			ids = append(ids, d.ID)
		}
		return json.Marshal(map[string]any{"ids": ids, "next": p.Next})
	case "update":
		id, change, _ := strings.Cut(arg, " ")
		var c struct {
			Set     map[string]any `json:"set"`
			Unset   []string       `json:"unset"`
			Version int64          `json:"version"`
		}
		if err := json.Unmarshal([]byte(change), &c); err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "update: %v", err)
		}
		ch := moat.Change{Unset: c.Unset, Version: c.Version}
		if c.Set != nil {
			ch.Set = c.Set
		}
		v, err := moat.DB.Update(model, id, ch)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"version": v})
	case "delete":
		id, version, _ := strings.Cut(arg, " ")
		var v int64
		if version != "" {
			var err error
			if v, err = strconv.ParseInt(version, 10, 64); err != nil {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "delete: %v", err)
			}
		}
		ok, err := moat.DB.Delete(model, id, v)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"deleted": ok})
	case "count":
		var raw [][3]json.RawMessage
		if arg != "" {
			if err := json.Unmarshal([]byte(arg), &raw); err != nil {
				return nil, abi.Errorf(abi.CodeInvalidArgument, "count: %v", err)
			}
		}
		where, err := conds(raw)
		if err != nil {
			return nil, err
		}
		n, err := moat.DB.Count(model, where...)
		if err != nil {
			return nil, err
		}
		return json.Marshal(map[string]any{"count": n})
	}
	return nil, abi.Errorf(abi.CodeInvalidArgument, "unknown command %q", op)
}

func conds(raw [][3]json.RawMessage) ([]moat.Cond, error) {
	out := make([]moat.Cond, len(raw))
	for i, c := range raw {
		var field, op string
		if json.Unmarshal(c[0], &field) != nil || json.Unmarshal(c[1], &op) != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "condition %d: %s", i, fmt.Sprint(c))
		}
		out[i] = moat.Where(field, op, c[2])
	}
	return out, nil
}
