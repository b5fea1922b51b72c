package javascript

import "github.com/moat-sandbox/moat/languages"

// Resident implements languages.ResidentDetector: a plugin whose entry
// file calls moat.action registers handlers, so its instance serves many
// calls (moat.js's serve, abi/resident.go). Comments and strings do not
// count: the lexer drops them.
func (Language) Resident(src languages.Source) bool {
	toks := lex(string(src.Entry().Content))
	for i := 0; i+3 < len(toks); i++ {
		if toks[i].kind == tokName && toks[i].text == "moat" && isPunct(toks[i+1], ".") &&
			toks[i+2].kind == tokName && toks[i+2].text == "action" && isPunct(toks[i+3], "(") {
			return true
		}
	}
	return false
}
