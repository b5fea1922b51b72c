package host_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/policy"
)

// Compile once, invoke many times: the embedding API in five calls.
func Example() {
	ctx := context.Background()
	dataDir, _ := os.MkdirTemp("", "moat-example")
	defer os.RemoveAll(dataDir)

	h, err := host.New(ctx, host.Config{DataDir: dataDir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close(ctx)

	wasm, err := os.ReadFile("../testdata/plugin.wasm")
	if err != nil {
		log.Fatal(err)
	}
	mod, err := h.Load(ctx, wasm, host.LoadOptions{Name: "demo", Config: map[string]string{"greeting": "hi"}})
	if err != nil {
		log.Fatal(err)
	}

	caller := policy.Principal{User: "ann", Org: "acme"}
	for _, input := range []string{"one", "two"} {
		res, err := mod.Invoke(ctx, host.Request{Action: "echo", Input: []byte(input), Principal: caller})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(string(res.Output))
	}

	// Failures are typed: the code says what happened.
	_, err = mod.Invoke(ctx, host.Request{Action: "trap", Principal: caller})
	fmt.Println(abi.CodeOf(err))
	// Output:
	// one
	// two
	// trap
}
