package abi_test

import (
	"encoding/json"
	"testing"

	"github.com/moat-sandbox/moat/abi"
)

// untagged is a request type without json tags (as extism's HttpRequest):
// json matches its field names without regard to case, and so does the
// message, in the words the request used.
type untagged struct {
	Url     string
	Headers map[string]string
	Count   uint8
}

func TestDescribeDecodeError(t *testing.T) {
	tests := []struct {
		req, want string
	}{
		{`{"url":5}`, `http_request: field "url": expected a string, got a number`},
		{`{"headers":{"a":[1]}}`, `http_request: field "headers.a": expected a string, got an array`},
		{`{"count":300}`, `http_request: field "count": expected a non-negative integer, got number 300`},
		{`{"count":-1}`, `http_request: field "count": expected a non-negative integer, got number -1`},
		{`null`, ``}, // json leaves the value alone: no error
		{`{"url":"x"`, `http_request: the request is not valid JSON (at byte 10): unexpected end of JSON input`},
		{`true`, `http_request: the request: expected an object, got true or false`},
	}
	for _, tt := range tests {
		var v untagged
		err := json.Unmarshal([]byte(tt.req), &v)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.req, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("%s decoded", tt.req)
		}
		if got := abi.DescribeDecodeError("http_request", []byte(tt.req), &v, err); got != tt.want {
			t.Errorf("%s:\n got  %s\n want %s", tt.req, got, tt.want)
		}
	}
}
