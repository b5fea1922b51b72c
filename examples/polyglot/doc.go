// Package polyglot holds the tests and benchmarks of the example plugins
// written with the guest SDKs: examples/hello-go (guests/go), hello-c and
// hello-cpp (guests/c), hello-rust (guests/rust) and hello-as
// (guests/assemblyscript). Every example is the same plugin, so one table
// of assertions runs over all of them: each is built from source with its
// real compiler, loaded with its moat.yaml the way `moat run` loads it, and
// invoked through the import transport, calling config, log and kv.
//
// The SDKs' fixtures (testdata/sdk-c, sdk-cpp, sdk-rust, sdk-as, the
// JavaScript script plugin sdk-js and the resident Ruby plugin sdk-ruby)
// have one action per part of their SDK, the same commands in every
// language: TestSDK drives config, log, kv, the raw call and error codes,
// TestSDKData the typed db, knowledge and task wrappers, through a real
// host. The fixtures testdata/outside-go, -c, -cpp, -rust, -as, -js,
// -python and -ruby hold the http, media and ai wrappers of all eight SDKs
// to one script (TestSDKOutside), against a loopback HTTP server and an
// OpenAI-compatible server in the test process.
//
// The package has no API; it exists for `go test ./examples/polyglot`.
package polyglot
