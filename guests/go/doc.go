// Package moat is the guest SDK for writing moat plugins in Go. A plugin is
// a WebAssembly reactor built with stock Go (no TinyGo) that registers named
// actions; the moat host invokes them with an input and returns their
// output. Inside an action the plugin reaches the host through ops: who it
// runs for ([Caller]), its configuration ([Config]), the structured log ([Log]), a key-value store
// ([KV]), documents in the models of its moat.yaml ([DB]), the
// knowledge base ([Knowledge]: documents searched by ranked full text),
// background tasks of its own actions ([Tasks]), HTTP requests the host
// sends for it ([HTTP]), media the host fetches and keeps ([Media]),
// model calls ([AI]), and any other op by name ([Call]).
//
// A complete plugin:
//
//	package main
//
//	import moat "github.com/moat-sandbox/moat/guests/go"
//
//	func init() {
//		moat.Action("greet", func(input []byte) ([]byte, error) {
//			greeting, found, err := moat.Config("greeting")
//			if err != nil {
//				return nil, err
//			}
//			if !found {
//				greeting = "Hello"
//			}
//			moat.Log.Info("greeting", "name", string(input))
//			return []byte(greeting + ", " + string(input) + "!"), nil
//		})
//	}
//
//	func main() {}
//
// Build it with:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.wasm .
//
// -buildmode=c-shared makes a reactor: the module exports _initialize
// instead of _start, main never runs, and package init functions run once
// per instance when the host instantiates it. That is why actions are
// registered in init. Ops are refused during init (there is no invocation
// yet), so read configuration inside actions.
//
// # Lifetime of an instance
//
// The host may reuse an instance for many invocations (pooled isolation),
// one at a time: package variables persist between calls, which makes
// caches cheap but means an action must not rely on starting from a clean
// state. A failed or panicking action does not end the instance; a trap,
// os.Exit, a timeout or a memory limit does.
//
// The input slice passed to an action is valid only during that call: the
// SDK reuses its buffer for the next input. Copy it to keep it.
//
// # Errors
//
// Ops that fail return an *abi.Error (package
// github.com/moat-sandbox/moat/abi) whose Code says why: abi.CodeDenied,
// abi.CodeTooLarge, abi.CodeUnknownOp and so on. An action that returns an
// error fails the invocation; an *abi.Error (or an error wrapping one) keeps
// its code, so an action can answer abi.CodeNotFound, while any other error
// is reported as abi.CodeGuestError.
//
// # The ABI
//
// The SDK implements moat guest ABI version 1 (see package abi): it imports
// moat.call and exports moat_abi_version, moat_actions, moat_alloc and
// moat_invoke. Only the small wasip1-tagged file touches the import and the
// exports; the rest is ordinary Go, so `go test` and `go vet` work on any
// platform. Outside a moat host the ops return an abi.CodeUnavailable error.
package moat
