package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/abi"
	"github.com/moat-sandbox/moat/host/store"
)

// testKVGroupCommit races many writers, each with a sequence of puts (some
// under a quota), deletes and overwrites of its own keys, over few scopes,
// so a backend that commits writes in groups gets groups that mix scopes,
// kinds and quota refusals. Every write a call acknowledged must be there
// afterwards, in the caller's order (the last acknowledged value of a key
// wins), every refusal must have written nothing, and every scope's usage
// must add up to its keys and values.
func (su suite) testKVGroupCommit(t *testing.T) {
	ctx := context.Background()
	s := su.open(t)
	const (
		writers = 48
		rounds  = 30
		quota   = 2000
	)
	scopes := []store.Scope{{Org: "gc-a", Module: "m"}, {Org: "gc-a", Module: "n"}, {Org: "gc-b", Module: "m"}}
	type final struct {
		value   string
		present bool
	}
	want := make([]map[string]final, writers) // writer → key → what its last acknowledged write left
	refused := make([]int, writers)
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		want[w] = map[string]final{}
		sc := scopes[w%len(scopes)]
		wg.Go(func() {
			for i := range rounds {
				key := fmt.Sprintf("w%02d/k%d", w, i%4)
				value := fmt.Sprintf("w%02d-%03d", w, i)
				var err error
				switch i % 5 {
				case 3:
					var deleted bool
					deleted, err = s.KVDelete(ctx, sc, key)
					if err == nil && deleted != want[w][key].present {
						errs <- fmt.Errorf("KVDelete(%v, %q) deleted = %v, want %v", sc, key, deleted, want[w][key].present)
						return
					}
					if err == nil {
						want[w][key] = final{}
					}
				case 4:
					// Big enough that the quota refuses some of them.
					value += string(make([]byte, 200))
					err = s.KVPutWithin(ctx, sc, key, []byte(value), quota)
					var ae *abi.Error
					if errors.As(err, &ae) && ae.Code == abi.CodeTooLarge {
						refused[w]++
						continue
					}
					if err == nil {
						want[w][key] = final{value, true}
					}
				default:
					err = s.KVPut(ctx, sc, key, []byte(value))
					if err == nil {
						want[w][key] = final{value, true}
					}
				}
				if err != nil {
					errs <- fmt.Errorf("writer %d round %d: %w", w, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	totalRefused := 0
	for w := range writers {
		sc := scopes[w%len(scopes)]
		totalRefused += refused[w]
		for i := range 4 {
			key := "w" + fmt.Sprintf("%02d", w) + "/k" + strconv.Itoa(i)
			f := want[w][key]
			v, found, err := s.KVGet(ctx, sc, key)
			if err != nil {
				t.Fatal(err)
			}
			if found != f.present || string(v) != f.value {
				t.Errorf("%v %q = %.12q (found %v), want %.12q (found %v): an acknowledged write is missing or out of order",
					sc, key, v, found, f.value, f.present)
			}
		}
	}
	for _, sc := range scopes {
		if n := usage(t, s, sc); n > quota+writers*300 {
			t.Errorf("%v uses %d bytes", sc, n)
		}
	}
	if totalRefused == 0 {
		t.Errorf("no put was refused by the quota of %d bytes; the test does not exercise refusals in a batch", quota)
	}
}
