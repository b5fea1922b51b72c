package host

import (
	"github.com/moat-sandbox/moat/internal/atomicfile"
)

// Shared compiled code (Config.CodeKey): hosts on one store hand each other
// wazero's compiled form of a module, authenticated with an HMAC under the
// code key, so that a module compiled by one replica loads on the others
// in tens of milliseconds. The mechanism, its trust argument and its
// prediction of wazero's file names are package host/internal/codeshare;
// the host makes one codeshare.Sharer at New and compiles through it.

// writeAtomic writes data to path whole or not at all (atomicfile), as
// wazero writes its own files.
func writeAtomic(path string, data []byte) error { return atomicfile.Write(path, data) }
