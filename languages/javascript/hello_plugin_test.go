package javascript_test

import "testing"

// TestHelloPlugin: examples/hello-js serves greet twice (interptest).
func TestHelloPlugin(t *testing.T) {
	suite.TestHelloPlugin(t, "hello-js", "main.js")
}
