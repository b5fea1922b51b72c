package extism_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/moat-sandbox/moat/host"
	_ "github.com/moat-sandbox/moat/host/extism" // Extism plug-ins load as host.KindExtism
	"github.com/moat-sandbox/moat/policy"
)

// An Extism plug-in (here a hand-written one with no PDK) loads like any
// module once the package is imported, and each exported function is an
// action.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "moat-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	h, err := host.New(ctx, host.Config{DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close(ctx)
	wasm, err := os.ReadFile("../../testdata/extism_upper.wasm")
	if err != nil {
		log.Fatal(err)
	}
	m, err := h.Load(ctx, wasm, host.LoadOptions{Name: "upper"})
	if err != nil {
		log.Fatal(err)
	}
	res, err := m.Invoke(ctx, host.Request{Action: "upper", Input: []byte("hello, extism"),
		Principal: policy.Principal{User: "ann", Org: "acme"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Kind(), m.Actions(), string(res.Output))
	// Output: extism [upper] HELLO, EXTISM
}
