package host

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/moat-sandbox/moat/host/internal/codeshare"
)

// cacheFiles are the files the compilation cache keeps for the code
// compiled under key: the rewritten module (rewrite; in the machine's
// cache for the machine's toolchain) and wazero's machine code of it,
// named as codeshare.New proves it predicts.
func (h *Host) cacheFiles(key string, code []byte, toolchain bool) []string {
	if h.cacheDir == "" {
		return nil
	}
	fp := codeshare.CurrentFingerprint(h.cfg.DebugInfo, hostCloseOnContextDone)
	return []string{filepath.Join(h.codeDir(toolchain), rewrittenDir, key+".wasm"), filepath.Join(h.cacheDir, fp.WazeroDir, fp.FileName(code))}
}

// CacheFiles lists the files the host's compilation cache keeps for m's
// code (none for a script, whose interpreter is shared, or a native
// plugin), for an embedder that removes them with ForgetCompiled once no
// module of the same bytes is loaded or stored any more. Call it before
// Close.
func (m *Module) CacheFiles() []string {
	if m.code.compiled == nil || m.code.interpRT != nil {
		return nil
	}
	return append([]string(nil), m.code.compiled.files...)
}

// ForgetCompiled removes files CacheFiles named. The cache is keyed by
// the bytes, so nothing else ever removes them: an embedder that prunes
// modules (moat serve's module quota) would otherwise keep the machine
// code of every version ever uploaded, often larger than the module. A
// later load of the same bytes compiles them again.
func ForgetCompiled(files []string) error {
	var errs []error
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
