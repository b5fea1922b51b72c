// Package all registers every language moat supports: import it for its
// side effects.
//
//	import _ "github.com/moat-sandbox/moat/languages/all"
package all

import (
	_ "github.com/moat-sandbox/moat/languages/assemblyscript"
	_ "github.com/moat-sandbox/moat/languages/bash"
	_ "github.com/moat-sandbox/moat/languages/c"
	_ "github.com/moat-sandbox/moat/languages/cpp"
	_ "github.com/moat-sandbox/moat/languages/golang"
	_ "github.com/moat-sandbox/moat/languages/java"
	_ "github.com/moat-sandbox/moat/languages/javascript"
	_ "github.com/moat-sandbox/moat/languages/kotlin"
	_ "github.com/moat-sandbox/moat/languages/lua"
	_ "github.com/moat-sandbox/moat/languages/nativepython"
	_ "github.com/moat-sandbox/moat/languages/perl"
	_ "github.com/moat-sandbox/moat/languages/php"
	_ "github.com/moat-sandbox/moat/languages/python"
	_ "github.com/moat-sandbox/moat/languages/ruby"
	_ "github.com/moat-sandbox/moat/languages/rust"
	_ "github.com/moat-sandbox/moat/languages/typescript"
)
