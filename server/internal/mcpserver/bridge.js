// moat-page.js for an MCP host (MCP Apps, SEP-1865): the window.moat API
// a module's page uses in moat's console, spoken as MCP Apps' JSON-RPC
// over postMessage to the host that renders the page. The host calls
// moat's tools as the person's MCP client: moat.call(action, input) is
// the tool module.action (authorized, confirmed and audited by moat as any
// MCP call), moat.mediaURL(id) reads the resource moat://media/{id} into a
// data: URL (the page has no network), and moat.confirm resolves false: an
// MCP host asks its person itself when an action needs a confirmation.
(function () {
  "use strict";
  var page = window.__moatPage || {};
  var next = 1;
  var pending = {};

  function request(method, params) {
    var id = next++;
    return new Promise(function (resolve, reject) {
      pending[id] = { resolve: resolve, reject: reject };
      window.parent.postMessage({ jsonrpc: "2.0", id: id, method: method, params: params }, "*");
    });
  }

  window.addEventListener("message", function (ev) {
    if (ev.source !== window.parent) return;
    var m = ev.data;
    if (!m || typeof m !== "object" || m.jsonrpc !== "2.0" || !("id" in m)) return;
    var p = pending[m.id];
    if (!p) return;
    delete pending[m.id];
    if (m.error) {
      var e = new Error(String(m.error.message || "failed"));
      e.code = "failed";
      p.reject(e);
    } else p.resolve(m.result);
  });

  var readyResolve;
  var ready = new Promise(function (r) { readyResolve = r; });
  var moat = {
    context: null,
    ready: ready,
    call: function (action, input) {
      var args = input === undefined ? {} : input;
      if (typeof input === "string") {
        // The console sends a string as the action's body; a tool takes
        // JSON arguments, so the string must be JSON.
        try { args = JSON.parse(input || "{}"); } catch (e) {
          var bad = new Error("the input is not JSON: a page in an MCP host passes an action an object or JSON text");
          bad.code = "invalid_argument";
          return Promise.reject(bad);
        }
      }
      return request("tools/call", { name: page.module + "." + String(action), arguments: args }).then(function (r) {
        var text = ((r && r.content) || []).map(function (c) { return c.text || ""; }).join("");
        if (r && r.isError) {
          var e = new Error(text || "failed");
          e.code = "failed";
          throw e;
        }
        if (r && r.structuredContent) return r.structuredContent;
        try { return JSON.parse(text); } catch (e) { return text; }
      });
    },
    confirm: function () { return Promise.resolve(false); },
    mediaURL: function (id) {
      var uri = "moat://media/" + String(id);
      return request("resources/read", { uri: uri }).then(function (r) {
        var c = (r && r.contents && r.contents[0]) || {};
        return "data:" + (c.mimeType || "application/octet-stream") + ";base64," + (c.blob || "");
      });
    }
  };
  window.moat = moat;
  request("ui/initialize", {
    protocolVersion: "2026-01-26",
    appInfo: { name: "moat page " + page.module + "/" + page.page, version: "1" },
    appCapabilities: {}
  }).then(function () {
    window.parent.postMessage({ jsonrpc: "2.0", method: "ui/notifications/initialized", params: {} }, "*");
    moat.context = { user: "", org: "", module: String(page.module || ""), page: String(page.page || "") };
    readyResolve(moat.context);
  });
})();
