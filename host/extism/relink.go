package extism

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// relink moves some of a module's function imports to another import
// module: it rewrites the module names in the import section and leaves
// every other byte as it was. It is what lets moat replace the Extism
// kernel's http_request, whose HTTP client the go-sdk hard-codes
// (http.DefaultClient, which follows redirects anywhere, honours
// HTTP_PROXY and dials whatever the name resolves to), without changing
// the plug-in its author shipped: the signature and digest are checked over
// the original bytes, and only the compiled copy is relinked, the way a
// dynamic linker interposes a symbol.
//
// moves maps "module\x00name" to the new module name. relink returns wasm
// itself when no import matches.
func relink(wasm []byte, moves map[string]string) ([]byte, error) {
	if len(wasm) < 8 || !bytes.Equal(wasm[:4], []byte("\x00asm")) {
		return nil, errors.New("not a WebAssembly binary")
	}
	r := &reader{b: wasm, off: 8}
	for r.off < len(r.b) {
		start := r.off
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		bodyStart := r.off
		if uint64(bodyStart)+uint64(size) > uint64(len(r.b)) {
			return nil, fmt.Errorf("section %d at byte %d runs past the end of the module", id, start)
		}
		if id != 2 { // not the import section
			r.off = bodyStart + int(size)
			continue
		}
		body, changed, err := relinkImports(r.b[bodyStart:bodyStart+int(size)], moves)
		if err != nil {
			return nil, fmt.Errorf("import section: %w", err)
		}
		if !changed {
			return wasm, nil
		}
		out := make([]byte, 0, len(wasm)+len(body)-int(size)+8)
		out = append(out, wasm[:start]...)
		out = append(out, 2)
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
		out = append(out, wasm[bodyStart+int(size):]...)
		return out, nil
	}
	return wasm, nil
}

// relinkImports rewrites one import section's body.
func relinkImports(body []byte, moves map[string]string) ([]byte, bool, error) {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return nil, false, err
	}
	out := binary.AppendUvarint(nil, uint64(n))
	changed := false
	for i := uint32(0); i < n; i++ {
		mod, err := r.name()
		if err != nil {
			return nil, false, fmt.Errorf("import %d: module name: %w", i, err)
		}
		name, err := r.name()
		if err != nil {
			return nil, false, fmt.Errorf("import %d: field name: %w", i, err)
		}
		descStart := r.off
		kind, err := r.byte()
		if err != nil {
			return nil, false, err
		}
		if err := r.skipImportDesc(kind); err != nil {
			return nil, false, fmt.Errorf("import %s.%s: %w", mod, name, err)
		}
		if to, ok := moves[mod+"\x00"+name]; ok && kind == 0 {
			mod, changed = to, true
		}
		out = binary.AppendUvarint(out, uint64(len(mod)))
		out = append(out, mod...)
		out = binary.AppendUvarint(out, uint64(len(name)))
		out = append(out, name...)
		out = append(out, body[descStart:r.off]...)
	}
	if r.off != len(body) {
		return nil, false, fmt.Errorf("%d bytes after the last import", len(body)-r.off)
	}
	return out, changed, nil
}

type reader struct {
	b   []byte
	off int
}

var errShort = errors.New("unexpected end of the module")

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) u32() (uint32, error) {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 || n > 5 || v > 1<<32-1 {
		return 0, errors.New("bad LEB128 integer")
	}
	r.off += n
	return uint32(v), nil
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	if uint64(r.off)+uint64(n) > uint64(len(r.b)) {
		return "", errShort
	}
	s := string(r.b[r.off : r.off+int(n)])
	r.off += int(n)
	return s, nil
}

// skipImportDesc skips an import descriptor after its kind byte: a type
// index (function), a table type, a memory type, a global type or a tag.
func (r *reader) skipImportDesc(kind byte) error {
	limits := func() error {
		flags, err := r.byte()
		if err != nil {
			return err
		}
		if _, err := r.u32(); err != nil { // min (memory64 limits would be u64; wazero does not take them)
			return err
		}
		if flags&1 != 0 {
			_, err = r.u32()
		}
		return err
	}
	switch kind {
	case 0: // function: type index
		_, err := r.u32()
		return err
	case 1: // table: reftype, limits
		if _, err := r.byte(); err != nil {
			return err
		}
		return limits()
	case 2: // memory: limits
		return limits()
	case 3: // global: valtype, mutability
		if _, err := r.byte(); err != nil {
			return err
		}
		_, err := r.byte()
		return err
	case 4: // tag: attribute, type index
		if _, err := r.byte(); err != nil {
			return err
		}
		_, err := r.u32()
		return err
	}
	return fmt.Errorf("unknown import kind %d", kind)
}
