package main

import (
	"os"
	"path/filepath"

	"github.com/moat-sandbox/moat/host"
)

// data is the data directory: --data, else host.DefaultDataDir().
func (g *globalFlags) data() string {
	if g.dataDir != "" {
		return g.dataDir
	}
	return host.DefaultDataDir()
}

// envCacheDir names the compile cache's directory apart from the data
// directory, for every command that loads modules (run, exec, inspect,
// toolchains warm, serve). An operator puts the cache on fast local disk,
// or shares one between the processes of a node; the tests of this
// package share one so that each interpreter compiles once per test
// binary rather than once per test.
const envCacheDir = "MOAT_CACHE_DIR"

// cacheSetting is where the compile cache (wazero's machine code, the
// snapshots of interpreters, the files of shared compiled code) lives and
// which setting put it there, so that a message about it names the
// setting to change.
type cacheSetting struct {
	dir  string // absolute
	from string // the setting, as the operator wrote it
	fix  string // how to choose another directory
}

// cache is the compile cache of the commands that open a host, made and
// checked writable (openCache): --cache-dir, else the cache_dir of the
// server configuration (--config), else $MOAT_CACHE_DIR, else the data
// directory's cache/. The order is the data directory's: the flag wins
// over the file, and the environment variable is the default of the file
// (serverConfig). Done once per process: confinement and the host both
// ask.
func (g *globalFlags) cache() (cacheSetting, error) {
	if g.cacheOpened != nil {
		return *g.cacheOpened, nil
	}
	var configured, file string
	if g.server != nil {
		configured, file = g.server.CacheDir, g.server.File
	}
	c, err := openCache(g.cacheDir, configured, file, g.data())
	if err != nil {
		return cacheSetting{}, err
	}
	g.cacheOpened = &c
	return c, nil
}

// openCache resolves the compile cache in cache's order for the given
// flag, cache_dir of file and data directory, and makes it (create).
func openCache(flag, configured, file, data string) (cacheSetting, error) {
	c, err := resolveCache(flag, configured, file, data)
	if err != nil {
		return cacheSetting{}, err
	}
	return c, c.create()
}

// resolveCache is cache's order for the given flag, cache_dir of file and
// data directory.
func resolveCache(flag, configured, file, data string) (cacheSetting, error) {
	const how = "a directory moat may create and write"
	var c cacheSetting
	switch env := os.Getenv(envCacheDir); {
	case flag != "":
		c = cacheSetting{flag, "--cache-dir", "give --cache-dir " + how}
	case configured != "":
		c = cacheSetting{configured, "cache_dir in " + file, "set cache_dir in " + file + " to " + how + ", or remove it to keep the cache in data_dir"}
	case env != "":
		c = cacheSetting{env, "$" + envCacheDir, "set $" + envCacheDir + " to " + how + ", or unset it to keep the cache in the data directory"}
	default:
		c = cacheSetting{filepath.Join(data, "cache"), "the data directory (--data, $MOAT_DATA)",
			"choose another data directory with --data or $MOAT_DATA, or put the cache apart with --cache-dir or $" + envCacheDir}
	}
	abs, err := filepath.Abs(c.dir)
	if err != nil {
		return cacheSetting{}, usagef("compile cache %s (from %s): %w; %s", c.dir, c.from, err, c.fix)
	}
	c.dir = abs
	return c, nil
}

// create makes the cache directory (mode 0700: compiled machine code and
// snapshots of guest memory are the host's alone) before anything else
// does, so that a directory that cannot be made fails here, with the
// setting that named it and the fix, rather than in Landlock's set-up or
// in wazero.
func (c cacheSetting) create() error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return usagef("compile cache %s (from %s): %w; %s", c.dir, c.from, err, c.fix)
	}
	// MkdirAll succeeds on a directory it may not write; wazero would
	// then compile every time, silently.
	probe, err := os.CreateTemp(c.dir, ".moat-write-check-*")
	if err != nil {
		return usagef("compile cache %s (from %s): not writable: %w; %s", c.dir, c.from, err, c.fix)
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}
