//go:build !linux

package wasmsnap

import (
	"errors"
	"io"
)

// Shared images are Linux's (shared_linux.go): elsewhere an image's
// memory is the Go heap's, and RestoreMapped copies it.

type sharedMem struct{}

func (*sharedMem) fd() int { return -1 }

// Shared returns img: no memory can be shared here.
func (img *Image) Shared() *Image { return img }

// ReadImage reads n bytes of r and decodes them (Unmarshal); checked is
// ignored.
func ReadImage(r io.Reader, n int64, checked bool) (*Image, error) {
	if n < int64(len(imageMagic))+4 || n > 1<<33 {
		return nil, errors.New("wasmsnap: not an image, or a damaged one")
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, errors.New("wasmsnap: not an image, or a damaged one")
	}
	return Unmarshal(b)
}
