// Command notes-go is the notes plugin in Go: each user's notes in a
// model of its moat.yaml (scope: user, so the host keeps one user's notes
// from every other user and organization), found by full-text search in
// the knowledge collection notes, with reminders as background tasks.
// examples/notes/python is the same plugin in Python; README.md walks
// through both over HTTP.
//
// Every action takes and answers JSON. A note answers as its fields and
// the host's metadata:
//
//	{"id":"…","version":2,"owner":"ann","created":"…","updated":"…",
//	 "title":"buy milk","body":"…","tags":["home"],"due":"2026-05-01T09:00:00.000Z","done":false}
//
// Failures keep their code: a bad input is invalid_argument (HTTP 400), a
// note the caller cannot see not_found (404), a stale version conflict
// (409).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/moat-sandbox/moat/abi"
	moat "github.com/moat-sandbox/moat/guests/go"
)

const (
	chatModel  = "small-chat" // the operator's model alias summarize asks (moat.yaml: ai)
	model      = "notes"      // the model in moat.yaml
	collection = "notes"      // the knowledge collection the notes are searched in
	maxTag     = 64           // characters in a tag; moat.yaml bounds their number
)

// editable are the fields a caller may set; reminded is the reminder's.
var editable = []string{"title", "body", "tags", "due", "done"}

func init() {
	moat.Action("create", create)
	moat.Action("get", get)
	moat.Action("list", list)
	moat.Action("update", update)
	moat.Action("delete", remove)
	moat.Action("search", search)
	moat.Action("remind", remind)
	moat.Action("reminder", reminder)
	moat.Action("summarize", summarize)
}

func invalid(format string, args ...any) error {
	return abi.Errorf(abi.CodeInvalidArgument, format, args...)
}

// decode reads input, a JSON object (empty input is {}), into v, refusing
// fields v does not have.
func decode(input []byte, v any) error {
	if len(strings.TrimSpace(string(input))) == 0 {
		input = []byte("{}")
	}
	d := json.NewDecoder(strings.NewReader(string(input)))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return invalid("the input is a JSON object: %v", err)
	}
	if d.More() {
		return invalid("the input is one JSON object; more follows it")
	}
	return nil
}

// fields takes the editable fields out of an input object, checked: only
// editable names, and tags of at most maxTag characters each (moat.yaml
// bounds the rest: the title's length, the number of tags, the types).
func fields(obj map[string]json.RawMessage) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for k, v := range obj {
		if !slices.Contains(editable, k) {
			return nil, invalid("unknown field %q: a note has %s", k, strings.Join(editable, ", "))
		}
		out[k] = v
	}
	if raw, ok := out["tags"]; ok {
		var tags []string
		if err := json.Unmarshal(raw, &tags); err != nil {
			return nil, invalid("tags is a list of strings: %v", err)
		}
		for _, tag := range tags {
			if tag == "" || utf8.RuneCountInString(tag) > maxTag {
				return nil, invalid("tag %.80q: a tag is 1 to %d characters", tag, maxTag)
			}
		}
	}
	return out, nil
}

// note is a stored note as the actions answer it.
func note(d moat.Doc) (map[string]any, error) {
	n := map[string]any{}
	if err := d.Decode(&n); err != nil {
		return nil, err
	}
	n["id"], n["version"], n["owner"] = d.ID, d.Version, d.Owner
	n["created"], n["updated"] = d.Created.UTC().Format(abi.DBTimeLayout), d.Updated.UTC().Format(abi.DBTimeLayout)
	return n, nil
}

func answer(v any) ([]byte, error) { return json.Marshal(v) }

// load reads note id of the caller: not_found when the caller's scope
// holds none (another user's note included).
func load(id string) (moat.Doc, error) {
	if id == "" {
		return moat.Doc{}, invalid("give the note's id: {\"id\":\"…\"}")
	}
	d, found, err := moat.DB.Get(model, id)
	if err != nil {
		return moat.Doc{}, err
	}
	if !found {
		return moat.Doc{}, abi.Errorf(abi.CodeNotFound, "no note %q", id)
	}
	return d, nil
}

// index puts the note's text into the knowledge collection, which
// moat.yaml declares scope: user: the host keeps it the caller's own, as
// it keeps the notes. Its owner goes in the meta for whoever reads the
// hits.
func index(d moat.Doc) error {
	var n struct {
		Title string   `json:"title"`
		Body  string   `json:"body"`
		Tags  []string `json:"tags"`
	}
	if err := d.Decode(&n); err != nil {
		return err
	}
	text := strings.Join(append([]string{n.Title, n.Body}, n.Tags...), "\n")
	_, err := moat.Knowledge.Add(collection, d.ID, text, map[string]any{"owner": d.Owner})
	return err
}

// create: {"title", "body"?, "tags"?, "due"?, "done"?} → the note.
func create(input []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := decode(input, &obj); err != nil {
		return nil, err
	}
	doc, err := fields(obj)
	if err != nil {
		return nil, err
	}
	if _, ok := doc["done"]; !ok {
		doc["done"] = json.RawMessage("false") // so that list's done filter finds it
	}
	id, _, err := moat.DB.Insert(model, doc)
	if err != nil {
		return nil, err
	}
	d, err := load(id)
	if err != nil {
		return nil, err
	}
	if err := index(d); err != nil {
		// A note search cannot find is not kept: the caller sees the
		// failure (a full collection, say) and nothing half-made.
		if _, derr := moat.DB.Delete(model, id, 0); derr != nil {
			return nil, fmt.Errorf("index note %s: %w (and removing it failed: %v)", id, err, derr)
		}
		return nil, err
	}
	moat.Log.Info("note created", "id", id)
	n, err := note(d)
	if err != nil {
		return nil, err
	}
	return answer(n)
}

// get: {"id"} → the note.
func get(input []byte) ([]byte, error) {
	var in struct {
		ID string `json:"id"`
	}
	if err := decode(input, &in); err != nil {
		return nil, err
	}
	d, err := load(in.ID)
	if err != nil {
		return nil, err
	}
	n, err := note(d)
	if err != nil {
		return nil, err
	}
	return answer(n)
}

// list: {"done"?, "tag"?, "limit"?, "after"?} → {"notes": [...], "next"?},
// the caller's notes by due time (notes without one last).
func list(input []byte) ([]byte, error) {
	var in struct {
		Done  *bool  `json:"done"`
		Tag   string `json:"tag"`
		Limit int    `json:"limit"`
		After string `json:"after"`
	}
	if err := decode(input, &in); err != nil {
		return nil, err
	}
	q := moat.Query{Order: []string{"due"}, Limit: in.Limit, After: in.After}
	if in.Done != nil {
		q.Where = append(q.Where, moat.Where("done", "=", *in.Done))
	}
	if in.Tag != "" {
		q.Where = append(q.Where, moat.Where("tags", "contains", in.Tag))
	}
	page, err := moat.DB.Query(model, q)
	if err != nil {
		return nil, err
	}
	notes := make([]map[string]any, 0, len(page.Docs))
	for _, d := range page.Docs {
		n, err := note(d)
		if err != nil {
			return nil, err
		}
		notes = append(notes, n)
	}
	out := map[string]any{"notes": notes}
	if page.Next != "" {
		out["next"] = page.Next
	}
	return answer(out)
}

// update: {"id", "version"?, fields to set..., "unset"?: [names]} → the
// note. With version, a note changed since is a conflict (HTTP 409): get
// it again and retry with its version.
func update(input []byte) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := decode(input, &obj); err != nil {
		return nil, err
	}
	var id string
	var version int64
	var unset []string
	for k, dst := range map[string]any{"id": &id, "version": &version, "unset": &unset} {
		if raw, ok := obj[k]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return nil, invalid("%s: %v", k, err)
			}
			delete(obj, k)
		}
	}
	set, err := fields(obj)
	if err != nil {
		return nil, err
	}
	for _, f := range unset {
		if !slices.Contains(editable, f) || f == "title" {
			return nil, invalid("unset %q: only body, tags, due and done can be removed", f)
		}
	}
	if len(set) == 0 && len(unset) == 0 {
		return nil, invalid("nothing to change: give fields to set (%s) or unset", strings.Join(editable, ", "))
	}
	if id == "" {
		return nil, invalid("give the note's id: {\"id\":\"…\"}")
	}
	if _, err := moat.DB.Update(model, id, moat.Change{Set: set, Unset: unset, Version: version}); err != nil {
		var e *abi.Error
		if errors.As(err, &e) && e.Code == abi.CodeConflict {
			return nil, abi.Errorf(abi.CodeConflict, "note %s changed since version %d: get it again and retry with its version", id, version)
		}
		return nil, err
	}
	d, err := load(id)
	if err != nil {
		return nil, err
	}
	if err := index(d); err != nil {
		return nil, err
	}
	n, err := note(d)
	if err != nil {
		return nil, err
	}
	return answer(n)
}

// delete: {"id", "version"?} → {"deleted": true}; its search entry goes
// with it.
func remove(input []byte) ([]byte, error) {
	var in struct {
		ID      string `json:"id"`
		Version int64  `json:"version"`
	}
	if err := decode(input, &in); err != nil {
		return nil, err
	}
	if in.ID == "" {
		return nil, invalid("give the note's id: {\"id\":\"…\"}")
	}
	deleted, err := moat.DB.Delete(model, in.ID, in.Version)
	if err != nil {
		return nil, err
	}
	if !deleted {
		return nil, abi.Errorf(abi.CodeNotFound, "no note %q", in.ID)
	}
	if _, err := moat.Knowledge.Delete(collection, in.ID); err != nil {
		return nil, err
	}
	return answer(map[string]bool{"deleted": true})
}

// search: {"q", "limit"?} → {"hits": [{"id", "title", "snippet", "score"}]},
// best first, the caller's notes only.
func search(input []byte) ([]byte, error) {
	var in struct {
		Q     string `json:"q"`
		Limit int    `json:"limit"`
	}
	if err := decode(input, &in); err != nil {
		return nil, err
	}
	hits := []map[string]any{}
	// The collection is user-scoped (moat.yaml): the host searches only
	// what was indexed for the caller (moat.Caller().User), whatever the
	// request says.
	found, err := moat.Knowledge.Search(collection, in.Q, moat.SearchOptions{Limit: in.Limit})
	if err != nil {
		return nil, err
	}
	for _, h := range found {
		// Each hit is read back in the caller's scope: a note deleted
		// since it was indexed is not shown.
		d, ok, err := moat.DB.Get(model, h.ID)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		var n struct {
			Title string `json:"title"`
		}
		if err := d.Decode(&n); err != nil {
			return nil, err
		}
		hits = append(hits, map[string]any{"id": h.ID, "title": n.Title, "snippet": h.Snippet, "score": h.Score})
	}
	return answer(map[string]any{"hits": hits})
}

// remind: {"id", "delay"?} → {"task", "existing"}: a task runs reminder
// on the note after delay ("90s", "2h") or, without one, at its due time
// (once per due time: the enqueue's key).
func remind(input []byte) ([]byte, error) {
	var in struct {
		ID    string `json:"id"`
		Delay string `json:"delay"`
	}
	if err := decode(input, &in); err != nil {
		return nil, err
	}
	d, err := load(in.ID)
	if err != nil {
		return nil, err
	}
	var opts moat.TaskOptions
	if in.Delay != "" {
		if opts.Delay, err = time.ParseDuration(in.Delay); err != nil || opts.Delay <= 0 {
			return nil, invalid("delay %q: a positive duration like 90s or 2h30m", in.Delay)
		}
	} else {
		var n struct {
			Due time.Time `json:"due"`
		}
		if err := d.Decode(&n); err != nil {
			return nil, err
		}
		if n.Due.IsZero() {
			return nil, invalid("note %s has no due time: set one, or give a delay", d.ID)
		}
		opts.At, opts.Key = n.Due, "remind "+d.ID+" at "+n.Due.UTC().Format(abi.DBTimeLayout)
	}
	arg, err := json.Marshal(map[string]string{"id": d.ID})
	if err != nil {
		return nil, err
	}
	task, existing, err := moat.Tasks.Enqueue("reminder", arg, opts)
	if err != nil {
		return nil, err
	}
	return answer(map[string]any{"task": task, "existing": existing})
}

// reminder is the task remind enqueues ({"id"}): it logs the reminder and
// marks the note reminded. It runs as the user who asked, so it sees only
// their notes; a note deleted since is nothing to remind of.
func reminder(input []byte) ([]byte, error) {
	var in struct {
		ID string `json:"id"`
	}
	if err := decode(input, &in); err != nil {
		return nil, err
	}
	d, err := load(in.ID)
	var e *abi.Error
	if errors.As(err, &e) && e.Code == abi.CodeNotFound {
		moat.Log.Info("reminder: the note is gone", "id", in.ID)
		return answer(map[string]any{"reminded": false})
	}
	if err != nil {
		return nil, err
	}
	var n struct {
		Title string `json:"title"`
	}
	if err := d.Decode(&n); err != nil {
		return nil, err
	}
	moat.Log.Info("reminder", "id", d.ID, "title", n.Title)
	// At the version read: a note changed meanwhile is a conflict, and the
	// task's attempt is retried.
	now := time.Now().UTC().Format(abi.DBTimeLayout)
	if _, err := moat.DB.Update(model, d.ID, moat.Change{Set: map[string]string{"reminded": now}, Version: d.Version}); err != nil {
		return nil, err
	}
	return answer(map[string]any{"reminded": true, "id": d.ID, "title": n.Title})
}

// main never runs in a plugin built with -buildmode=c-shared; the Go
// toolchain still requires it in package main.
func main() {}

// maxSummarized bounds the notes summarize reads: the prompt stays small,
// and so does what the call costs the organization's token budget.
const maxSummarized = 20

// summarize: {"tag"?} → {"summary", "notes", "model_call_id", "usage"}:
// the caller's open notes (up to maxSummarized, by due time, with tag
// when given), summarized by the model small-chat. The host checks the
// grant (moat.yaml: ai: [small-chat]) and the organization's and the
// module's daily token budgets before the call, and the audit trail
// holds the model call under model_call_id, joined to this invocation.
func summarize(input []byte) ([]byte, error) {
	var in struct {
		Tag string `json:"tag"`
	}
	if err := decode(input, &in); err != nil {
		return nil, err
	}
	q := moat.Query{Where: []moat.Cond{moat.Where("done", "=", false)}, Order: []string{"due"}, Limit: maxSummarized}
	if in.Tag != "" {
		q.Where = append(q.Where, moat.Where("tags", "contains", in.Tag))
	}
	page, err := moat.DB.Query(model, q)
	if err != nil {
		return nil, err
	}
	if len(page.Docs) == 0 {
		return answer(map[string]any{"summary": "", "notes": 0})
	}
	var b strings.Builder
	for i, d := range page.Docs {
		n, err := note(d)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%d. %v", i+1, n["title"])
		if due, ok := n["due"]; ok {
			fmt.Fprintf(&b, " (due %v)", due)
		}
		if body, _ := n["body"].(string); body != "" {
			fmt.Fprintf(&b, ": %s", clipText(body, 500))
		}
		b.WriteByte('\n')
	}
	c, err := moat.AI.Complete(chatModel, []abi.AIMessage{
		moat.SystemMessage("You summarize a person's open notes in at most three sentences. Name what is due first."),
		moat.UserMessage(b.String()),
	}, moat.CompleteOptions{MaxTokens: 200})
	if err != nil {
		return nil, err
	}
	return answer(map[string]any{"summary": c.Text, "notes": len(page.Docs), "model_call_id": c.ModelCallID, "usage": c.Usage})
}

// clipText cuts s to at most n runes.
func clipText(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
