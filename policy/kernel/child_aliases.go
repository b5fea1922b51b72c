package kernel

import "github.com/moat-sandbox/moat/policy/kernel/child"

// The wrapper's side of the layers lives in package child (a leaf, so the
// wrapper binary stays small); these names keep this package's API whole.

type (
	ConfineSpec = child.ConfineSpec
	ChildFS     = child.ChildFS
	Rlimits     = child.Rlimits
	RootSpec    = child.RootSpec
	Mount       = child.Mount
)

const (
	ConfineEnv      = child.ConfineEnv
	ConfineFromFD3  = child.ConfineFromFD3
	ConfineAckFD    = child.ConfineAckFD
	ConfineAck      = child.ConfineAck
	ConfineExitCode = child.ConfineExitCode
	ConfinePrefix   = child.ConfinePrefix
	ELFInterpreter  = child.ELFInterpreter
)

var (
	SystemDirs  = child.SystemDirs
	SystemEtc   = child.SystemEtc
	DeviceFiles = child.DeviceFiles
	ScratchDirs = child.ScratchDirs
	RootLinks   = child.RootLinks
)

// ConfineMain runs the confinement wrapper when ConfineEnv is set; see
// child.ConfineMain.
func ConfineMain() { child.ConfineMain() }

// RestrictChild applies a child's Landlock layer; see child.RestrictChild.
func RestrictChild(spec ChildFS) error { return child.RestrictChild(spec) }

// CheckMount says whether a root holding taken can show m; see
// child.CheckMount.
func CheckMount(m Mount, taken []string) error { return child.CheckMount(m, taken) }

// LandlockABI returns the kernel's Landlock ABI version.
func LandlockABI() (int, error) { return child.LandlockABI() }

// ApplyRlimits sets a child's resource limits; see child.ApplyRlimits.
func ApplyRlimits(r Rlimits, uid int) error { return child.ApplyRlimits(r, uid) }
