// Stock Extism test plugins, built by host/extism's tests with stock Go:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o X.wasm ./X
//
// They are their own module so that the main module does not depend on the
// Extism Go PDK, which only builds for wasip1.
module github.com/moat-sandbox/moat/testdata/extism

go 1.24

require github.com/extism/go-pdk v1.1.3
