package server

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDecodeJSONBody: bodies two JSON parsers could read differently are
// refused, naming what is wrong; plain ones decode as encoding/json would.
func TestDecodeJSONBody(t *testing.T) {
	type files struct {
		Name string `json:"name"`
	}
	type req struct {
		Language string  `json:"language"`
		Files    []files `json:"files"`
		Stdin    string  `json:"stdin"`
	}
	cases := []struct {
		name, body string
		strict     bool
		err        string // "" decodes
		lang       string
	}{
		{"plain", `{"language":"c","files":[{"name":"a"}]}`, true, "", "c"},
		{"whitespace", " \n{ \"language\" : \"c\" }\n ", true, "", "c"},
		{"duplicate", `{"language":"c","language":"python"}`, true, `the key "language" is given twice in the body`, ""},
		{"duplicate by case", `{"language":"c","LANGUAGE":"python"}`, true, `the key "LANGUAGE" is given twice`, ""},
		{"duplicate by case not strict", `{"Language":"c","language":"python"}`, false, `the key "language" is given twice`, ""},
		{"duplicate nested", `{"language":"c","files":[{"name":"a","name":"b"}]}`, true, `the key "name" is given twice in the body's files`, ""},
		{"same key in sibling objects", `{"files":[{"name":"a"},{"name":"b"}],"language":"c"}`, true, "", "c"},
		{"same key at two levels", `{"language":"c","files":[{"name":"language"}]}`, true, "", "c"},
		{"two values", `{"language":"c"}{"language":"python"}`, true, "more than one JSON value", ""},
		{"value then garbage", `{"language":"c"} x`, true, "invalid character", ""},
		{"deep", strings.Repeat("[", 40) + strings.Repeat("]", 40), false, "nests deeper than 32", ""},
		{"deep objects", strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40), false, "nests deeper than 32", ""},
		{"unknown field strict", `{"language":"c","limit":1}`, true, `unknown field "limit"`, ""},
		{"unknown field lax", `{"language":"c","limit":1}`, false, "", "c"},
		{"unicode escape duplicate", `{"language":"c","langu\u0061ge":"python"}`, true, `given twice`, ""},
		{"not an object", `"c"`, true, "cannot unmarshal", ""},
		{"empty", ``, true, "EOF", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r req
			err := decodeJSONBody([]byte(c.body), &r, c.strict)
			if c.err == "" {
				if err != nil || r.Language != c.lang {
					t.Fatalf("err %v, language %q; want %q", err, r.Language, c.lang)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("err %v, want one containing %q", err, c.err)
			}
		})
	}
}

// FuzzDecodeJSONBody: no body panics the decoder, and a body it accepts
// means the same to encoding/json alone (no second reading).
func FuzzDecodeJSONBody(f *testing.F) {
	for _, s := range []string{
		`{"language":"c","files":[{"name":"main.c","content":"int main(){}"}],"stdin":"x","limits":{"timeout":"1s"}}`,
		`{"runs":[{"language":"bash","files":[{"name":"m.sh","content":"echo"}]}]}`,
		`{"language":"c","language":"python"}`,
		`{"language":"c","LANGUAGE":"python"}`,
		`{"language":"c"}{"language":"python"}`,
		strings.Repeat("[", 100),
		`{"language":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var a RunRequest
		if decodeJSONBody(body, &a, true) != nil {
			return
		}
		var b RunRequest
		if err := json.Unmarshal(body, &b); err != nil {
			t.Fatalf("accepted, but encoding/json refuses it: %v", err)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Fatalf("two readings: %s vs %s", ja, jb)
		}
		var p struct {
			Runs []RunRequest `json:"runs"`
		}
		_ = decodeJSONBody(body, &p, true)
		_ = isBatch(body)
	})
}
