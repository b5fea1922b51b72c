package python_test

import "testing"

// TestHelloPlugin: examples/hello-python serves greet twice (interptest).
func TestHelloPlugin(t *testing.T) {
	suite.TestHelloPlugin(t, "hello-python", "main.py")
}
