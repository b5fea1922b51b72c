package moatdir_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/moat-sandbox/moat/internal/moatdir"
)

func TestDirs(t *testing.T) {
	root := os.Geteuid() == 0
	tests := []struct {
		name                       string
		xdg, home, data            string
		wantHome, wantData, wantTC string
	}{
		{name: "xdg", xdg: "/x", home: "/h", wantHome: "/x/moat", wantData: "/x/moat/data", wantTC: "/x/moat/toolchains"},
		{name: "home", home: "/h", wantHome: "/h/.local/share/moat", wantData: "/h/.local/share/moat/data", wantTC: "/h/.local/share/moat/toolchains"},
		{name: "relative xdg is ignored", xdg: "rel", home: "/h", wantHome: "/h/.local/share/moat", wantData: "/h/.local/share/moat/data", wantTC: "/h/.local/share/moat/toolchains"},
		{name: "MOAT_DATA wins", xdg: "/x", home: "/h", data: "/d", wantHome: "/x/moat", wantData: "/d", wantTC: "/x/moat/toolchains"},
		{name: "no home", wantHome: "", wantData: "moat-data", wantTC: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("XDG_DATA_HOME", tt.xdg)
			t.Setenv("HOME", tt.home)
			t.Setenv("MOAT_DATA", tt.data)
			if root && !filepath.IsAbs(tt.xdg) {
				// Root's home is the system's unless XDG_DATA_HOME says.
				tt.wantHome, tt.wantTC = moatdir.SystemHome, filepath.Join(moatdir.SystemHome, "toolchains")
				if tt.data == "" {
					tt.wantData = filepath.Join(moatdir.SystemHome, "data")
				}
			}
			if got := moatdir.Home(); got != tt.wantHome {
				t.Errorf("Home() = %q, want %q", got, tt.wantHome)
			}
			if got := moatdir.Data(); got != tt.wantData {
				t.Errorf("Data() = %q, want %q", got, tt.wantData)
			}
			if got := moatdir.Toolchains(); got != tt.wantTC {
				t.Errorf("Toolchains() = %q, want %q", got, tt.wantTC)
			}
		})
	}
}
