package mcpserver

import (
	"context"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mediaPrefix is the URI of a media item as a resource: moat://media/{id}.
const mediaPrefix = "moat://media/"

// addResources adds the media items of the key's organization as a
// resource template: reading moat://media/{id} is GET /v1/media/{id} with
// the key, so an item of another organization is not found, as it is by
// curl. There is no list (resources/list would cost a media listing on
// every request of a stateless server); a tool's output names the items.
func (c *caller) addResources(s *mcp.Server) {
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
