package python_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/python"
)

func TestValidateDeny(t *testing.T) {
	deny := []string{"import:os", "import:subprocess", "import:socket", "os.system", "eval", "exec"}
	tests := []struct {
		name, src string
		want      []string // "rule:line"
	}{
		{"plain import", "import os\n", []string{"import:1"}},
		{"submodule", "import os.path as p, json\n", []string{"import:1"}},
		{"later in a list", "import json, subprocess\n", []string{"import:1"}},
		{"from import", "\nfrom subprocess import run\n", []string{"import:2"}},
		{"from submodule", "from os.path import join\n", []string{"import:1"}},
		{"dunder import", "m = __import__('socket')\n", []string{"import:1"}},
		{"importlib", "import importlib\nm = importlib.import_module(\"os\")\n", []string{"import:2"}},
		{"prefix is not the module", "import osmosis\nimport socketserver\n", nil},
		{"relative import", "from . import os\nfrom .os import x\n", nil},
		{"comment and string", "# import os\ns = 'import os; eval(x)'\nt = \"\"\"\nimport socket\n\"\"\"\n", nil},
		{"builtin call", "x = eval('1+1')\n", []string{"call:1"}},
		{"attribute of the same name", "obj.eval(1)\nobj.exec()\n", nil},
		{"dotted call", "import json\nos.system('ls')\n", []string{"call:2"}},
		{"inside an f-string", "x = f\"{eval('2')} and {{eval}}\"\n", []string{"call:1"}},
		{"raw and byte strings", "r = rb'\\eval(' + br\"os.system\"\n", nil},
		{"allowed code", "import json, sys\nprint(json.dumps(sys.argv))\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := languages.Source{Files: []languages.File{{Name: "main.py", Content: []byte(tt.src)}}}
			var got []string
			for _, v := range (python.Language{}).Validate(src, languages.ValidationProfile{Deny: deny}) {
				got = append(got, fmt.Sprintf("%s:%d", v.Rule, v.Line))
				if v.File != "main.py" || v.Message == "" {
					t.Errorf("violation %+v lacks its file or message", v)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("violations %v, want %v", got, tt.want)
			}
		})
	}
}

func TestValidateOnlyPythonFiles(t *testing.T) {
	src := languages.Source{Files: []languages.File{
		{Name: "main.py", Content: []byte("print(1)\n")},
		{Name: "notes.txt", Content: []byte("import os\n")},
	}}
	if vs := (python.Language{}).Validate(src, languages.ValidationProfile{Deny: []string{"import:os"}}); len(vs) != 0 {
		t.Fatalf("violations in a non-Python file: %v", vs)
	}
}

func ExampleLanguage_Validate() {
	src := languages.Source{Files: []languages.File{{Name: "main.py", Content: []byte("import subprocess\nsubprocess.run(['ls'])\n")}}}
	for _, v := range (python.Language{}).Validate(src, languages.ValidationProfile{Deny: []string{"import:subprocess"}}) {
		fmt.Println(v)
	}
	// Output:
	// main.py:1: importing "subprocess" is denied by the validation profile (deny: import:subprocess); remove it, or run under a profile that allows it (import)
}
