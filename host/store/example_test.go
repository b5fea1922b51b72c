package store_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/moat-sandbox/moat/host/store"
)

func Example() {
	dir, err := os.MkdirTemp("", "moat-store-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx := context.Background()
	s, err := store.Open(ctx, dir)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	sc := store.Scope{Org: "acme", Module: "greeter"}
	if err := s.KVPut(ctx, sc, "greeting", []byte("hello, moat")); err != nil {
		log.Fatal(err)
	}
	value, found, err := s.KVGet(ctx, sc, "greeting")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(found, string(value))
	// Output: true hello, moat
}
