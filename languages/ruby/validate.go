package ruby

import "github.com/moat-sandbox/moat/languages"

// Validate implements languages.Language.
func (Language) Validate(src languages.Source, p languages.ValidationProfile) []languages.Violation {
	var vs []languages.Violation
	// MERGE: vs = languages.ValidateCommon(src, p) // size, file count, UTF-8, paths
	return vs
}
