// Command mediaguest is a test fixture: a moat plugin that calls the
// media ops through the Go guest SDK's raw door (moat.Call). Build it
// with:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o mediaguest.wasm ./testdata/mediaguest
//
// Its one action, media, runs the op its input names with the request
// its input holds, and answers with the op's reply:
//
//	{"op":"media.put","req":{"data":"<base64>","type":"image/png"}} -> {"id":...,"type":...,...}
//
// An op's error fails the action with the op's code.
package main

import (
	"encoding/json"

	"github.com/moat-sandbox/moat/abi"
	moat "github.com/moat-sandbox/moat/guests/go"
)

type command struct {
	Op  string          `json:"op"`
	Req json.RawMessage `json:"req"`
}

func init() {
	moat.Action("media", func(in []byte) ([]byte, error) {
		var c command
		if err := json.Unmarshal(in, &c); err != nil {
			return nil, abi.Errorf(abi.CodeInvalidArgument, "media: input is not a command: %v", err)
		}
		var reply json.RawMessage
		if err := moat.Call(c.Op, c.Req, &reply); err != nil {
			return nil, err
		}
		return reply, nil
	})
}

func main() {}
