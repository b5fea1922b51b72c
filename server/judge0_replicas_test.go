package server_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moat-sandbox/moat/host/store/postgres/pgtest"
	"github.com/moat-sandbox/moat/internal/testenv"
	"github.com/moat-sandbox/moat/server"
)

// TestJudge0Replicas: two replicas on one PostgreSQL database serve one
// Judge0 API. A submission stored with wait=false through replica A is
// answered by replica B; a batch of 20 stored through A, with A stopped
// at once and started again later, is polled to completion through B
// and through the restarted A.
func TestJudge0Replicas(t *testing.T) {
	testenv.Slow(t, "two servers on PostgreSQL running 21 submissions")
	db := pgtest.Database(t)
	replica := func(c *server.Config) {
		withJudge0(t)(c)
		c.DatabaseURL = db
	}
	a := start(t, "", replica)
	b := start(t, "", replica)
	key := a.key(t, "acme", "ann", "dev")
	judge0Langs(t, a, key, 71)

	r := a.j0(t, "POST", "/submissions", key, `{"source_code":"print(input()[::-1])","language_id":71,"stdin":"ab","expected_output":"ba"}`)
	token, _ := r.json(t)["token"].(string)
	if r.status != 201 || token == "" {
		t.Fatalf("create on A: %d %s", r.status, r.body)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		g := b.j0(t, "GET", "/submissions/"+token+"?fields=status_id,stdout", key, "")
		if g.status != 200 {
			t.Fatalf("GET on B: %d %s", g.status, g.body)
		}
		if id := g.json(t)["status_id"].(float64); id > 2 {
			if id != 3 || g.json(t)["stdout"] != "ba\n" {
				t.Errorf("on B: %s", g.body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not finished: %s", g.body)
		}
	}

	var subs []map[string]any
	for i := range 20 {
		subs = append(subs, map[string]any{"source_code": fmt.Sprintf("print(int(input()) + %d)", i), "language_id": 71, "stdin": "100", "expected_output": fmt.Sprint(100 + i)})
	}
	body, _ := json.Marshal(map[string]any{"submissions": subs})
	r = a.j0(t, "POST", "/submissions/batch", key, string(body))
	var created []struct{ Token string }
	if err := json.Unmarshal(r.body, &created); err != nil || r.status != 201 || len(created) != 20 {
		t.Fatalf("batch on A: %d %s", r.status, r.body)
	}
	a.stop(t) // what A had claimed goes back to the queue
	tokens := make([]string, 0, 20)
	for _, c := range created {
		tokens = append(tokens, c.Token)
	}
	poll := func(ts *testServer) (done, accepted int, body []byte) {
		g := ts.j0(t, "GET", "/submissions/batch?fields=status_id&tokens="+strings.Join(tokens, ","), key, "")
		var page struct {
			Submissions []struct {
				StatusID int `json:"status_id"`
			}
		}
		if err := json.Unmarshal(g.body, &page); err != nil || g.status != 200 || len(page.Submissions) != 20 {
			t.Fatalf("batch show: %d %s", g.status, g.body)
		}
		for _, s := range page.Submissions {
			if s.StatusID > 2 {
				done++
			}
			if s.StatusID == 3 {
				accepted++
			}
		}
		return done, accepted, g.body
	}
	// B alone for a while, then A again beside it.
	time.Sleep(time.Second)
	a = start(t, "", replica)
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		poll(b) // B answers throughout
		doneA, accepted, page := poll(a)
		if doneA == 20 {
			if accepted != 20 {
				t.Errorf("not all accepted: %s", page)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after A's restart, %d of 20 finished: %s", doneA, page)
		}
	}
	if done, accepted, page := poll(b); done != 20 || accepted != 20 {
		t.Errorf("B sees %d finished, %d accepted: %s", done, accepted, page)
	}
}
