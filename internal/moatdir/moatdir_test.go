package moatdir

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDirs: where moat's home is, for root and for a user, from the
// environment; and, this being a test binary, never the machine's homes
// (/var/lib/moat, the ~ the test binary started with) unless the
// environment names them.
func TestDirs(t *testing.T) {
	machineHome := startHome
	if machineHome == "" {
		machineHome = "/home/machine-user"
		startHome = machineHome
		t.Cleanup(func() { startHome = "" })
	}
	tests := []struct {
		name                       string
		root                       bool
		xdg, home, data, system    string
		wantHome, wantData, wantTC string
		wantSystemTC               string
	}{
		{name: "xdg", xdg: "/x", home: "/h", wantHome: "/x/moat", wantData: "/x/moat/data", wantTC: "/x/moat/toolchains"},
		{name: "xdg as root", root: true, xdg: "/x", wantHome: "/x/moat", wantData: "/x/moat/data", wantTC: "/x/moat/toolchains"},
		{name: "home", home: "/h", wantHome: "/h/.local/share/moat", wantData: "/h/.local/share/moat/data", wantTC: "/h/.local/share/moat/toolchains"},
		{name: "relative xdg is ignored", xdg: "rel", home: "/h", wantHome: "/h/.local/share/moat", wantData: "/h/.local/share/moat/data", wantTC: "/h/.local/share/moat/toolchains"},
		{name: "MOAT_DATA wins", xdg: "/x", home: "/h", data: "/d", wantHome: "/x/moat", wantData: "/d", wantTC: "/x/moat/toolchains"},
		{name: "no home", wantHome: "", wantData: "moat-data", wantTC: ""},
		{name: "root with a system home named", root: true, system: "/s", wantHome: "/s", wantData: "/s/data", wantTC: "/s/toolchains", wantSystemTC: "/s/toolchains"},
		{name: "a user with a system home named keeps their own", home: "/h", system: "/s", wantHome: "/h/.local/share/moat", wantData: "/h/.local/share/moat/data", wantTC: "/h/.local/share/moat/toolchains", wantSystemTC: "/s/toolchains"},
		// Hostile: each of these would be the machine's home outside a test.
		{name: "root in a test binary: not /var/lib/moat", root: true, wantHome: "", wantData: "moat-data", wantTC: ""},
		{name: "root, relative system home: not /var/lib/moat", root: true, system: "rel", wantHome: "", wantData: "moat-data", wantTC: ""},
		{name: "root, relative xdg: not /var/lib/moat", root: true, xdg: "rel", wantHome: "", wantData: "moat-data", wantTC: ""},
		{name: "a user whose HOME is the machine's", home: machineHome, wantHome: "", wantData: "moat-data", wantTC: ""},
		{name: "the machine's HOME with a relative xdg", home: machineHome, xdg: "rel", wantHome: "", wantData: "moat-data", wantTC: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("XDG_DATA_HOME", tt.xdg)
			t.Setenv("HOME", tt.home)
			t.Setenv(EnvData, tt.data)
			t.Setenv(EnvSystemHome, tt.system)
			if got := home(tt.root); got != tt.wantHome {
				t.Errorf("home(root=%t) = %q, want %q", tt.root, got, tt.wantHome)
			}
			// Data and Toolchains follow Home, for this process's uid.
			want := home(tt.root)
			if got := Home(); got != home(isRoot()) {
				t.Errorf("Home() = %q, want home(%t) = %q", got, isRoot(), home(isRoot()))
			}
			if isRoot() == tt.root {
				if got := Data(); got != tt.wantData {
					t.Errorf("Data() = %q, want %q", got, tt.wantData)
				}
				if got := Toolchains(); got != tt.wantTC {
					t.Errorf("Toolchains() = %q, want %q (home %q)", got, tt.wantTC, want)
				}
			}
			if got := SystemToolchains(); got != tt.wantSystemTC {
				t.Errorf("SystemToolchains() = %q, want %q", got, tt.wantSystemTC)
			}
			if got := SystemHome(); got == DefaultSystemHome || got != "" && got != filepath.Clean(tt.system) {
				t.Errorf("SystemHome() = %q in a test binary with $%s=%q", got, EnvSystemHome, tt.system)
			}
		})
	}
}

func isRoot() bool { return os.Geteuid() == 0 }
