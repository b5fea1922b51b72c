// Command routeguest is the plugin of the server's route tests: each
// action answers a route of its manifest (server/routes_test.go) through
// the Go SDK's Request and Response.
package main

import (
	"encoding/json"

	moat "github.com/moat-sandbox/moat/guests/go"
)

func init() {
	moat.Action("get_item", func(input []byte) ([]byte, error) {
		req, err := moat.Request(input)
		if err != nil {
			return nil, err
		}
		p, err := moat.Caller()
		if err != nil {
			return nil, err
		}
		return moat.JSON(200, map[string]any{"id": req.Param("id"), "q": req.QueryValue("q"), "accept": req.Header("Accept"),
			"auth": req.Auth, "user": p.User, "roles": p.Roles, "remote": req.Remote})
	})
	moat.Action("create_item", func(input []byte) ([]byte, error) {
		req, err := moat.Request(input)
		if err != nil {
			return nil, err
		}
		body, err := req.Bytes()
		if err != nil {
			return nil, err
		}
		var item struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &item); err != nil || item.ID == "" {
			return moat.JSON(400, map[string]string{"error": "send {\"id\": \"...\"}"})
		}
		b, _ := json.Marshal(map[string]any{"id": item.ID, "bytes": len(body)})
		return moat.Response{Status: 201, ContentType: "application/json", Body: b,
			Headers: map[string]string{"Location": "items/" + item.ID}}.Encode()
	})
	// echo answers with the request it got, as JSON.
	moat.Action("echo", func(input []byte) ([]byte, error) {
		req, err := moat.Request(input)
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(req.RouteRequest)
		return moat.Response{ContentType: "application/json", Body: b}.Encode()
	})
	moat.Action("cookie", func(input []byte) ([]byte, error) {
		return moat.Response{Body: []byte("hi"), Headers: map[string]string{"Set-Cookie": "session=stolen"}}.Encode()
	})
	moat.Action("html", func(input []byte) ([]byte, error) {
		return moat.Response{ContentType: "text/html; charset=utf-8", Body: []byte("<script>alert(localStorage.key)</script>"),
			Headers: map[string]string{"Cache-Control": "no-store"}}.Encode()
	})
	moat.Action("plain", func(input []byte) ([]byte, error) {
		return []byte("plain output"), nil
	})
	moat.Action("hook", func(input []byte) ([]byte, error) {
		req, err := moat.Request(input)
		if err != nil {
			return nil, err
		}
		p, err := moat.Caller()
		if err != nil {
			return nil, err
		}
		body, _ := req.Bytes()
		return moat.JSON(200, map[string]any{"event": req.Header("X-GitHub-Event"), "bytes": len(body), "user": p.User, "roles": p.Roles})
	})
}

func main() {}
