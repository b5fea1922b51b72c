package pool_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/moat-sandbox/moat/internal/pool"
)

func TestLIFOOrderAndBound(t *testing.T) {
	p := pool.New[int](2)
	if !p.Put(1) || !p.Put(2) {
		t.Fatal("a pool of two refused one of two values")
	}
	if p.Put(3) {
		t.Fatal("a full pool kept a third value")
	}
	if v, ok := p.Get(); !ok || v != 2 {
		t.Fatalf("Get = %d, %v; want the value put last, 2", v, ok)
	}
	if v, ok := p.Get(); !ok || v != 1 {
		t.Fatalf("Get = %d, %v; want 1", v, ok)
	}
	if _, ok := p.Get(); ok {
		t.Fatal("an empty pool returned a value")
	}
}

func TestLIFOPreferred(t *testing.T) {
	var p pool.LIFO[int] // the zero value: open, unbounded
	for i := range 5 {
		p.Put(i)
	}
	even := func(v int) bool { return v%2 == 0 }
	if v, _ := p.GetPreferred(even); v != 4 {
		t.Fatalf("GetPreferred(even) = %d, want the last even one, 4", v)
	}
	if v, _ := p.GetPreferred(even); v != 2 {
		t.Fatalf("GetPreferred(even) = %d, want 2", v)
	}
	if v, _ := p.GetPreferred(func(int) bool { return false }); v != 3 {
		t.Fatalf("with none preferred, GetPreferred = %d, want the last, 3", v)
	}
	var left []int
	p.Each(func(v int) { left = append(left, v) })
	if !slices.Equal(left, []int{0, 1}) || p.Len() != 2 {
		t.Fatalf("left %v (Len %d), want [0 1]", left, p.Len())
	}
}

func TestLIFOCloseAndDrain(t *testing.T) {
	p := pool.New[string](0)
	p.Put("a")
	if got := p.Drain(); !slices.Equal(got, []string{"a"}) || p.Len() != 0 {
		t.Fatalf("Drain = %v, Len %d", got, p.Len())
	}
	if !p.Put("b") {
		t.Fatal("a drained pool is still open, and refused a value")
	}
	if got := p.Close(); !slices.Equal(got, []string{"b"}) || !p.Closed() {
		t.Fatalf("Close = %v, Closed %v", got, p.Closed())
	}
	if p.Put("c") {
		t.Fatal("a closed pool kept a value: the caller would never discard it")
	}
	if got := p.Close(); len(got) != 0 {
		t.Fatalf("a second Close returned %v", got)
	}
}

func TestLIFOConcurrent(t *testing.T) {
	p := pool.New[int](8)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if v, ok := p.Get(); ok {
					p.Put(v)
				} else {
					p.Put(i)
				}
			}
		}()
	}
	wg.Wait()
	if n := p.Len(); n < 1 || n > 8 {
		t.Fatalf("Len = %d, want 1..8", n)
	}
}

func TestLIFONil(t *testing.T) {
	var p *pool.LIFO[int]
	if _, ok := p.Get(); ok || p.Put(1) || p.Len() != 0 || p.Close() != nil || !p.Closed() {
		t.Fatal("a nil pool is not an empty, closed one")
	}
}
