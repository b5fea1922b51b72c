package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mediaPrefix is the URI of a media item as a resource: moat://media/{id}.
const mediaPrefix = "moat://media/"

// mediaCursor marks a resources/list cursor that continues the media
// listing after an item: "media:" and the item's id (GET /v1/media's
// after, which the API checks).
const mediaCursor = "media:"

// mediaPage is how many media items one resources/list page holds.
const mediaPage = 50

// addResources adds the media items of the key's organization as a
// resource template: reading moat://media/{id} is GET /v1/media/{id} with
// the key, so an item of another organization is not found, as it is by
// curl. resources/list lists them after the pages, mediaPage at a time,
// from GET /v1/media (asked only when a client lists resources, not to
// build every request's server).
func (c *caller) addResources(s *mcp.Server) {
	s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			lr, ok := req.(*mcp.ListResourcesRequest)
			if method != "resources/list" || !ok {
				return next(ctx, method, req)
			}
			return c.listResources(ctx, lr, next)
		}
	})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: mediaPrefix + "{id}", Name: "media",
		Title:       "moat media item",
		Description: "An image or other media item a module kept (its id as GET /v1/media and the actions' outputs name it)."},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			uri := req.Params.URI
			id, ok := strings.CutPrefix(uri, mediaPrefix)
			if !ok || id == "" || len(id) > 128 || strings.ContainsFunc(id, func(r rune) bool {
				return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
			}) {
				return nil, mcp.ResourceNotFoundError(uri)
			}
			client := "unknown"
			if info := req.ClientInfo(); info != nil {
				client = info.Name
			}
			ans, err := c.do(ctx, http.MethodGet, "/v1/media/"+escape(id), nil, client, "resource:media")
			if err != nil {
				return nil, err
			}
			if ans.status != http.StatusOK {
				return nil, mcp.ResourceNotFoundError(uri)
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: ans.ctype, Blob: ans.body}}}, nil
		})
}

// listResources answers resources/list: the pages (the SDK's own list of
// the registered resources) on the first page, then the media items, a
// page of GET /v1/media at a time.
func (c *caller) listResources(ctx context.Context, req *mcp.ListResourcesRequest, next mcp.MethodHandler) (mcp.Result, error) {
	cursor := ""
	if req.Params != nil {
		cursor = req.Params.Cursor
	}
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	after, ok := strings.CutPrefix(cursor, mediaCursor)
	if !ok {
		if cursor != "" {
			return nil, fmt.Errorf("mcp: resources/list: the cursor %q is not one this server gave", Label(cursor))
		}
		res, err := next(ctx, "resources/list", req)
		if err != nil {
			return nil, err
		}
		if lr, ok := res.(*mcp.ListResourcesResult); ok {
			out.Resources = append(out.Resources, lr.Resources...)
		}
	}
	client := "unknown"
	if info := req.Session.InitializeParams(); info != nil && info.ClientInfo != nil {
		client = Label(info.ClientInfo.Name)
	}
	path := fmt.Sprintf("/v1/media?limit=%d", mediaPage)
	if after != "" {
		path += "&after=" + queryEscape(after)
	}
	ans, err := c.do(ctx, http.MethodGet, path, nil, client, "resources/list")
	if err != nil {
		return nil, err
	}
	if ans.status == http.StatusForbidden {
		return out, nil // a key that may not list media lists the pages alone
	}
	if ans.status != http.StatusOK {
		return nil, fmt.Errorf("mcp: resources/list: %w", ans.err())
	}
	var list struct {
		Items []struct {
			ID      string    `json:"id"`
			Type    string    `json:"type"`
			Size    int64     `json:"size"`
			Module  string    `json:"module"`
			Created time.Time `json:"created"`
		} `json:"items"`
		Next string `json:"next"`
	}
	if err := json.Unmarshal(ans.body, &list); err != nil {
		return nil, fmt.Errorf("mcp: resources/list: GET /v1/media: %w", err)
	}
	for _, it := range list.Items {
		out.Resources = append(out.Resources, &mcp.Resource{URI: mediaPrefix + it.ID, Name: "media " + it.ID, MIMEType: it.Type, Size: it.Size,
			Title:       "media item of " + Label(it.Module),
			Description: fmt.Sprintf("A %s item module %s kept on %s.", Label(it.Type), Label(it.Module), it.Created.UTC().Format(time.DateOnly))})
	}
	if list.Next != "" {
		out.NextCursor = mediaCursor + list.Next
	}
	return out, nil
}
