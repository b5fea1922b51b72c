package all_test

import (
	"context"
	"fmt"
	"log"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/languages"
	_ "github.com/moat-sandbox/moat/languages/all"
)

// An executor runs code-execution jobs on a host: validate, build (cached
// by content), run under limits. A failing program is a result with a
// status, not an error.
func ExampleExecutor_Exec() {
	ctx := context.Background()
	h, err := host.New(ctx, host.Config{DataDir: "moat-data"})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close(ctx)
	ex, err := languages.NewExecutor(languages.ExecutorConfig{Host: h, BuildCacheDir: "moat-data/build-cache"})
	if err != nil {
		log.Fatal(err)
	}
	res, err := ex.Exec(ctx, languages.ExecRequest{
		Language: "c",
		Source: languages.Source{Files: []languages.File{{Name: "main.c", Content: []byte(
			"#include <stdio.h>\nint main(void) { char s[32]; fgets(s, 32, stdin); printf(\"hello %s\", s); return 0; }\n")}}},
		Stdin: []byte("moat\n"),
	})
	if err != nil {
		log.Fatal(err) // moat's own failure: a toolchain missing, the disk full
	}
	fmt.Printf("%s %q cached=%v\n", res.Status, res.Stdout, res.BuildCached)
}
