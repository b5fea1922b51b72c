package server_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/moat-sandbox/moat/server"
)

// TestReadyzSaysWhatItLacks: /readyz is 200 for the probes either way,
// and its body names the kernel layers the replica runs without (as
// moat serve records them once confined) and the languages it cannot
// run, so an operator reads there what a container denied.
func TestReadyzSaysWhatItLacks(t *testing.T) {
	ts := start(t, "", nil)
	get := func() server.ReadyJSON {
		t.Helper()
		r := ts.do(t, "GET", "/readyz", "", nil)
		if r.status != http.StatusOK {
			t.Fatalf("/readyz: %d %s", r.status, r.body)
		}
		var got server.ReadyJSON
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatalf("/readyz: %v: %s", err, r.body)
		}
		return got
	}
	if got := get(); got.Status != "ready" || got.Confinement != nil {
		t.Errorf("before any confinement: %+v, want ready and no confinement", got)
	}
	ts.SetConfinement([]string{"landlock (ABI 7)", "seccomp"}, map[string]string{"cgroup": "not root: the host cannot create its own cgroup", "all": "x"})
	got := get()
	if got.Confinement == nil || !slices.Equal(got.Confinement.Missing, []string{"all", "cgroup"}) || !slices.Equal(got.Confinement.Applied, []string{"landlock (ABI 7)", "seccomp"}) {
		t.Errorf("confinement %+v, want applied landlock and seccomp, missing all and cgroup (names only)", got.Confinement)
	}
	// This server has no code executor: no language either way (the
	// image test, deploy/image_test.go, checks a replica's languages).
	if got.Languages == nil || got.Unavailable == nil {
		t.Errorf("languages %v, unavailable %v: want lists, empty here", got.Languages, got.Unavailable)
	}
	for _, l := range got.Languages {
		if slices.Contains(got.Unavailable, l) {
			t.Errorf("%s is both available and unavailable", l)
		}
	}
}
