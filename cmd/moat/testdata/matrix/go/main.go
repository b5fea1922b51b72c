// Command matrix-go is the acceptance matrix's Go plugin (see
// ../README.md).
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/moat-sandbox/moat/abi"
	moat "github.com/moat-sandbox/moat/guests/go"
)

func init() {
	moat.Action("all", all)
	moat.Action("noop", func(input []byte) ([]byte, error) { return input, nil })
}

// attempt adds family's line: ok and what fn returns, or err and why.
func attempt(lines *[]string, family string, fn func() (string, error)) {
	v, err := fn()
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		*lines = append(*lines, family+" err io: "+pe.Err.Error())
	case err != nil:
		*lines = append(*lines, family+" err "+err.Error())
	default:
		*lines = append(*lines, strings.TrimRight(family+" ok "+v, " "))
	}
}

func config(key string) string {
	v, found, err := moat.Config(key)
	if err != nil || !found {
		return "-"
	}
	return v
}

func all(input []byte) ([]byte, error) {
	value := string(input)
	var lines []string
	attempt(&lines, "log", func() (string, error) {
		return "", moat.Log.Write("info", "matrix", map[string]any{"input": value})
	})
	attempt(&lines, "config", func() (string, error) {
		v, found, err := moat.Config("greeting")
		if !found {
			v = "-"
		}
		return v, err
	})
	attempt(&lines, "kv", func() (string, error) {
		old, found, err := moat.KV.Get("matrix")
		if err != nil {
			return "", err
		}
		if err := moat.KV.Put("matrix", input); err != nil {
			return "", err
		}
		if !found {
			return "-", nil
		}
		return string(old), nil
	})
	attempt(&lines, "db", func() (string, error) {
		n, err := moat.DB.Count("notes")
		if err != nil {
			return "", err
		}
		_, _, err = moat.DB.Insert("notes", map[string]any{"title": value})
		return fmt.Sprint(n), err
	})
	attempt(&lines, "knowledge", func() (string, error) {
		hits, err := moat.Knowledge.Search("docs", "matrix", moat.SearchOptions{})
		if err != nil {
			return "", err
		}
		_, err = moat.Knowledge.Add("docs", value, "matrix "+value, nil)
		return fmt.Sprint(len(hits)), err
	})
	attempt(&lines, "tasks", func() (string, error) {
		id, _, err := moat.Tasks.Enqueue("noop", input, moat.TaskOptions{Delay: time.Hour})
		if err != nil {
			return "", err
		}
		st, err := moat.Tasks.Status(id)
		if err != nil {
			return "", err
		}
		return st.State, nil
	})
	attempt(&lines, "http", func() (string, error) {
		r, err := moat.HTTP.Fetch(moat.HTTPRequest{URL: config("url"), Timeout: 5 * time.Second})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d %s", r.Status, r.Body), nil
	})
	attempt(&lines, "media", func() (string, error) {
		item, err := moat.Media.Put([]byte(config("pdf")), "application/pdf")
		if err != nil {
			return "", err
		}
		info, err := moat.Media.Info(item.ID)
		return fmt.Sprintf("%s %d", info.Type, info.Size), err
	})
	attempt(&lines, "ai", func() (string, error) {
		c, err := moat.AI.Complete("small-chat", []abi.AIMessage{moat.UserMessage("say matrix")}, moat.CompleteOptions{})
		if err != nil {
			return "", err
		}
		return c.Text, nil
	})
	attempt(&lines, "files", func() (string, error) {
		b, err := os.ReadFile(config("file"))
		return strings.TrimSpace(string(b)), err
	})
	return []byte(strings.Join(lines, "\n") + "\n"), nil
}

func main() {}
