package media

import (
	"context"
	"errors"
	"image"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/abi"
)

// TestDecodeSlotsWait: a decode waits while others hold the memory it
// needs, and gives up with the invocation's deadline, saying so.
func TestDecodeSlotsWait(t *testing.T) {
	s := NewDecodeSlots(100)
	release, err := s.acquire(context.Background(), 80)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = s.acquire(ctx, 30)
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Code != abi.CodeTimeout {
		t.Fatalf("acquire past the deadline = %v, want timeout", err)
	}
	done := make(chan error)
	go func() {
		r, err := s.acquire(context.Background(), 30)
		if err == nil {
			r()
		}
		done <- err
	}()
	release()
	if err := <-done; err != nil {
		t.Fatalf("acquire after the release: %v", err)
	}
}

// TestDisplayedToRaw: a rectangle of the upright image maps to the
// stored pixels it shows, for every orientation, on a 40×20 image.
func TestDisplayedToRaw(t *testing.T) {
	// The displayed top-left 10×5 corner.
	tests := []struct {
		o    int
		want image.Rectangle
	}{
		{1, image.Rect(0, 0, 10, 5)},
		{2, image.Rect(30, 0, 40, 5)},
		{3, image.Rect(30, 15, 40, 20)},
		{4, image.Rect(0, 15, 10, 20)},
		{5, image.Rect(0, 0, 5, 10)},
		{6, image.Rect(0, 10, 5, 20)},
		{7, image.Rect(35, 10, 40, 20)},
		{8, image.Rect(35, 0, 40, 10)},
	}
	for _, tt := range tests {
		if got := displayedToRaw(image.Rect(0, 0, 10, 5), tt.o, 40, 20); got != tt.want {
			t.Errorf("orientation %d: %v, want %v", tt.o, got, tt.want)
		}
	}
}
