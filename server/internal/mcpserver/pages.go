package mcpserver

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCP Apps (SEP-1865, extension io.modelcontextprotocol/ui, spec
// 2026-01-26): a server's HTML user interfaces are resources under ui://
// of this MIME type, and a tool names the one that shows its results in
// _meta.ui.resourceUri. The go-sdk v1.8.0 has no types for it: it is a
// convention over resources, _meta and capabilities.extensions.
const (
	AppsExtension = "io.modelcontextprotocol/ui"
	AppMIMEType   = "text/html;profile=mcp-app"
	pagePrefix    = "ui://"
)

// page is one entry of GET /v1/pages: a page the key's principal may
// open (the same check the console's menu and page routes make).
type page struct {
	Module string   `json:"module"`
	Name   string   `json:"name"`
	Title  string   `json:"title"`
	Entry  string   `json:"entry"`
	Files  []string `json:"files"`
}

func (p page) uri() string { return pagePrefix + p.Module + "/" + p.Name }

// mcpBridge is moat-page.js for an MCP host: the same window.moat API,
// spoken as MCP Apps' JSON-RPC over postMessage to the host (ui/initialize,
// tools/call of module.action, resources/read of moat://media/{id}).
//
//go:embed bridge.js
var mcpBridge string

// pageBridgeFile is the console's bridge a page loads by this name
// (policy.PageBridgeFile); in an MCP host it is mcpBridge instead.
const pageBridgeFile = "moat-page.js"

// addPages adds each page the key's principal may open as an MCP App
// resource, ui://{module}/{page}. Only those are registered, so reading
// any other URI — a page of another organization, one whose roles or
// permissions the principal lacks, a path with .. — is the SDK's "not
// found", exactly as for a page that does not exist.
func (c *caller) addPages(s *mcp.Server, pages []page) {
	for _, p := range pages {
		s.AddResource(&mcp.Resource{URI: p.uri(), Name: p.Module + "/" + p.Name, Title: p.Title, MIMEType: AppMIMEType,
			Description: fmt.Sprintf("The page %q of the moat module %s, as an MCP App.", p.Title, p.Module)},
			func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				client := "unknown"
				if info := req.ClientInfo(); info != nil {
					client = Label(info.Name)
				}
				html, err := c.pageDocument(ctx, p, client)
				if err != nil {
					return nil, err
				}
				return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: p.uri(), MIMEType: AppMIMEType, Text: html,
					Meta: mcp.Meta{"ui": pageUIMeta}}}}, nil
			})
	}
}

// pageUIMeta is what a page's resource asks of the host that renders it:
// no origin to connect to, load from or frame (an empty csp: the host's
// strictest policy, MCP Apps' "no network" default), which is the
// console's pageCSP — connect-src 'none', nothing from elsewhere — and no
// permissions (camera, microphone, geolocation, clipboard).
var pageUIMeta = map[string]any{
	"csp":           map[string]any{"connectDomains": []string{}, "resourceDomains": []string{}, "frameDomains": []string{}, "baseUriDomains": []string{}},
	"permissions":   map[string]any{},
	"prefersBorder": true,
}

// maxPageDocument bounds a page as one document: its entry with its
// scripts, styles and images inlined.
const maxPageDocument = 8 << 20

// pageDocument is the page as one HTML document for an MCP host: the
// host renders a resource's text in its own sandboxed frame, and fetches
// nothing else from moat (the frame has no network), so the page's own
// files that its entry loads by name — <script src>, <link
// rel=stylesheet href>, <img src> — are put in the document, and
// moat-page.js is mcpBridge. Each file is read with the key by the API's
// page route, which checks again that the principal may open the page.
func (c *caller) pageDocument(ctx context.Context, p page, client string) (string, error) {
	fetch := func(file string) ([]byte, error) {
		ans, err := c.do(ctx, http.MethodGet, "/v1/modules/"+escape(p.Module)+"/pages/"+escape(p.Name)+"/files/"+escape(file), nil, client, "resource:page")
		if err != nil {
			return nil, err
		}
		if ans.status != http.StatusOK {
			return nil, mcp.ResourceNotFoundError(p.uri())
		}
		return ans.body, nil
	}
	entry, err := fetch(p.Entry)
	if err != nil {
		return "", err
	}
	own := map[string]bool{pageBridgeFile: true}
	for _, f := range p.Files {
		own[f] = true
	}
	total := len(entry)
	var ferr error
	out := pageRefRE.ReplaceAllFunc(entry, func(tag []byte) []byte {
		if ferr != nil {
			return tag
		}
		m := pageRefRE.FindSubmatch(tag)
		elem, file := strings.ToLower(string(m[1])), string(m[3])
		if len(m[4]) > 0 {
			file = string(m[4])
		}
		if !own[file] {
			return tag // not the page's: left as it is, and the host's CSP loads nothing from elsewhere
		}
		if elem == "link" && !stylesheetRE.Match(tag) {
			return tag
		}
		var body []byte
		if file == pageBridgeFile {
			body = []byte(mcpBridge)
			if elem == "script" {
				ctx, _ := json.Marshal(map[string]string{"module": p.Module, "page": p.Name})
				body = append([]byte("window.__moatPage="+string(ctx)+";\n"), body...)
			}
		} else if body, ferr = fetch(file); ferr != nil {
			return tag
		}
		if total += len(body); total > maxPageDocument {
			ferr = fmt.Errorf("mcp: page %s of module %s is over %d bytes with its files inlined", p.Name, p.Module, maxPageDocument)
			return tag
		}
		switch elem {
		case "script":
			// The tag's own closing </script> follows it in the document.
			return append([]byte("<script>"), escapeClosing("script", body)...)
		case "link":
			return append(append([]byte("<style>"), escapeClosing("style", body)...), "</style>"...)
		default: // img
			typ := mime.TypeByExtension(path.Ext(file))
			if typ == "" {
				typ = "application/octet-stream"
			}
			uri := "data:" + typ + ";base64," + base64.StdEncoding.EncodeToString(body)
			return bytes.Replace(tag, m[2], []byte(`"`+uri+`"`), 1)
		}
	})
	if ferr != nil {
		return "", ferr
	}
	return strings.ToValidUTF8(string(out), "\uFFFD"), nil
}

// escapeClosing turns each </script (or </style) in an inlined file's
// text into <\/script, so the file stays inside the one element it is put
// in (in a script, "<\/" is still "</" to JavaScript's strings and
// regular expressions).
func escapeClosing(elem string, body []byte) []byte {
	return closingRE[elem].ReplaceAllFunc(body, func(m []byte) []byte { return append([]byte(`<\/`), m[2:]...) })
}

var (
	// pageRefRE finds the opening tag of a script, stylesheet link or
	// image that names a file: group 1 the element, 2 the quoted value,
	// 3 or 4 the value. A script's tag keeps its closing </script> after it.
	pageRefRE    = regexp.MustCompile(`(?i)<(script|link|img)\b[^>]*?\s(?:src|href)\s*=\s*("([^"<>]*)"|'([^'<>]*)')[^>]*>`)
	stylesheetRE = regexp.MustCompile(`(?i)\srel\s*=\s*["']?stylesheet`)
	closingRE    = map[string]*regexp.Regexp{"script": regexp.MustCompile(`(?i)</script`), "style": regexp.MustCompile(`(?i)</style`)}
)
