package languages_test

import (
	"fmt"

	"github.com/moat-sandbox/moat/languages"
)

// ValidateCommon refuses names that would leave the job directory, and
// says how to fix each problem.
func ExampleValidateCommon() {
	src := languages.Source{Files: []languages.File{
		{Name: "main.c", Content: []byte("int main(void) { return 0; }\n")},
		{Name: "../../etc/cron.d/x", Content: []byte("* * * * * root sh\n")},
	}}
	for _, v := range languages.ValidateCommon(src, languages.ValidationProfile{}) {
		fmt.Println(v)
	}
	// Output:
	// ../../etc/cron.d/x: ".." is not allowed in a file name: name files relative to the submission, without leaving it (path)
}
