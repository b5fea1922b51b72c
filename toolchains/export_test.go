package toolchains

// SetMaxPackageFiles lowers the entry bound for a test, restoring it after.
func SetMaxPackageFiles(n int) (restore func()) {
	old := maxPackageFiles
	maxPackageFiles = n
	return func() { maxPackageFiles = old }
}
