package kernel

import (
	"strings"
	"testing"
)

// podmanMountinfo is /proc/self/mountinfo's /proc part in a container of
// moat's image under podman (runc): proc, its masks and read-only binds.
const podmanMountinfo = `900 899 0:80 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
901 900 0:81 / /proc/acpi ro,relatime - tmpfs tmpfs ro,size=0k
902 900 0:5 /null /proc/kcore rw,nosuid - devtmpfs devtmpfs rw
903 900 0:80 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw
904 899 0:82 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
`

// hostMountinfo is a host's: proc with binfmt_misc only, which the
// kernel lets a fresh proc sit beside.
const hostMountinfo = `22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
23 22 0:22 / /proc/sys/fs/binfmt_misc rw,relatime shared:13 - autofs systemd-1 rw
24 1 0:23 / /proc\040x rw - tmpfs tmpfs rw
`

func TestPlanProc(t *testing.T) {
	for _, tc := range []struct {
		name       string
		privileged bool
		mountinfo  string
		setting    string
		bind       bool
		err        string // a part of the refusal; "" for none
	}{
		{"root on a host", true, hostMountinfo, "", false, ""},
		{"root under masks", true, podmanMountinfo, "", false, ""},
		{"unprivileged on a host", false, hostMountinfo, "", false, ""},
		{"unprivileged on a host, bind set", false, hostMountinfo, "bind", false, ""},
		{"pod, no setting: refused, naming the setting", false, podmanMountinfo, "", false, "set MOAT_NATIVE_PROC=bind"},
		{"pod, bind", false, podmanMountinfo, "bind", true, ""},
		{"pod, bind with spaces", false, podmanMountinfo, " bind\n", true, ""},
		{"pod, another value", false, podmanMountinfo, "unmasked", false, `MOAT_NATIVE_PROC="unmasked": the one value is "bind"`},
		{"host, another value", true, hostMountinfo, "yes", false, "the one value"},
		{"hostile long value clipped", false, podmanMountinfo, strings.Repeat("x", 5000), false, "…"},
		{"no mountinfo", false, "", "", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planProc(tc.privileged, []byte(tc.mountinfo), tc.setting)
			if p.Bind != tc.bind {
				t.Errorf("bind %v, want %v (%+v)", p.Bind, tc.bind, p)
			}
			switch {
			case tc.err == "" && p.Err != nil:
				t.Errorf("refused: %v", p.Err)
			case tc.err != "" && (p.Err == nil || !strings.Contains(p.Err.Error(), tc.err)):
				t.Errorf("error %v, want one with %q", p.Err, tc.err)
			}
			if p.Err != nil && len(p.Err.Error()) > 600 {
				t.Errorf("error of %d bytes: a hostile setting must be clipped", len(p.Err.Error()))
			}
			if p.Bind && !strings.Contains(p.Note, "/proc/kcore") {
				t.Errorf("note %q does not name the masks", p.Note)
			}
		})
	}
}

func TestProcMasks(t *testing.T) {
	got := procMasks([]byte(podmanMountinfo))
	want := []string{"/proc/acpi", "/proc/kcore", "/proc/sys"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("masks %q, want %q", got, want)
	}
	if got := procMasks([]byte(hostMountinfo)); len(got) != 0 {
		t.Errorf("a host's binfmt_misc and /proc x are no masks: %q", got)
	}
}
