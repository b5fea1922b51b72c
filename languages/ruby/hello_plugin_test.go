package ruby_test

import "testing"

// TestHelloPlugin: examples/hello-ruby serves greet twice (interptest).
func TestHelloPlugin(t *testing.T) {
	interpreter(t)
	suite.TestHelloPlugin(t, "hello-ruby", "main.rb")
}
