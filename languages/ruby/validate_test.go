package ruby_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/languages"
	"github.com/moat-sandbox/moat/languages/ruby"
)

func TestValidateDeny(t *testing.T) {
	deny := []string{"backticks", "system", "exec", "IO.popen", "import:socket"}
	tests := []struct {
		name, src string
		want      []string // "rule:line"
	}{
		{"backticks", "x = `ls`\n", []string{"shell:1"}},
		{"percent x", "\nx = %x(ls -l)\n", []string{"shell:2"}},
		{"kernel call", "system('ls')\nKernel.exec 'ls'\n", []string{"call:1", "call:2"}},
		{"method of the same name", "obj.system\nobj&.exec\ndef system; end\n", nil},
		{"constant method", "IO.popen('ls')\nIO::popen('ls')\nFile.popen\n", []string{"call:1", "call:2"}},
		{"require", "require 'socket'\nrequire(\"socket\")\nrequire 'socketry'\n", []string{"import:1", "import:2"}},
		{"comments strings symbols", "# system('ls') `ls`\ns = 'system(1)' + \"IO.popen\"\nm = :system\n=begin\nsystem\n=end\n", nil},
		{"interpolation", "s = \"#{system('ls')}\"\n", []string{"call:1"}},
		{"heredoc body", "s = <<~EOS\n  system('ls') `x`\nEOS\nexec('ls')\n", []string{"call:4"}},
		{"regexp and division", "r = /system(/\nx = 4 / 2 / 1\n", nil},
		{"allowed code", "puts ARGV.map(&:upcase).join(',')\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := languages.Source{Files: []languages.File{{Name: "main.rb", Content: []byte(tt.src)}}}
			var got []string
			for _, v := range (ruby.Language{}).Validate(src, languages.ValidationProfile{Deny: deny}) {
				got = append(got, fmt.Sprintf("%s:%d", v.Rule, v.Line))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("violations %v, want %v", got, tt.want)
			}
		})
	}
}

func ExampleLanguage_Validate() {
	src := languages.Source{Files: []languages.File{{Name: "main.rb", Content: []byte("puts `whoami`\n")}}}
	for _, v := range (ruby.Language{}).Validate(src, languages.ValidationProfile{Deny: []string{"backticks"}}) {
		fmt.Println(v)
	}
	// Output:
	// main.rb:1: command substitution (backticks or %x) is denied by the validation profile (deny: backticks); remove it, or run under a profile that allows it (shell)
}
