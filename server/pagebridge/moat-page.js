// moat-page.js: the bridge between a module's page and the moat console.
//
// A page runs in a sandboxed frame with an opaque origin and no network
// (Content-Security-Policy connect-src 'none'): it holds no key and can
// reach nothing but its parent, the console, by postMessage. The console
// checks every message (this frame, its shape, the page's own module),
// calls the action as the signed-in person through the page's route (each
// call authorized, rate-limited and audited with the page's name), shows
// confirmations itself, and answers here.
//
//   const notes = await moat.call("list", {});        // an action of this page's module
//   if (await moat.confirm("Delete this note?")) ...  // asked by the console, not the page
//   img.src = await moat.mediaURL(id);                // a signed URL of a media item
//   moat.context                                       // {user, org, module, page}
//
// Served by moat serve at the page's URL (load it with
// <script src="moat-page.js"></script>); guests/pages holds the same file.
(function () {
  "use strict";
  var PROTOCOL = "moat.page/1";
  var next = 1;
  var pending = {};
  var readyResolve;
  var ready = new Promise(function (r) { readyResolve = r; });

  function send(msg) {
    msg.moat = PROTOCOL;
    msg.id = next++;
    return new Promise(function (resolve, reject) {
      pending[msg.id] = { resolve: resolve, reject: reject };
      // The page's origin is opaque, and the console's is not this
      // page's to know: the console checks that the message comes from
      // this frame.
      window.parent.postMessage(msg, "*");
    });
  }

  window.addEventListener("message", function (ev) {
    if (ev.source !== window.parent) return;
    var m = ev.data;
    if (!m || typeof m !== "object" || m.moat !== PROTOCOL) return;
    if (m.type === "context") {
      moat.context = { user: String(m.user || ""), org: String(m.org || ""), module: String(m.module || ""), page: String(m.page || "") };
      readyResolve(moat.context);
      return;
    }
    var p = pending[m.id];
    if (!p) return;
    delete pending[m.id];
    if (m.ok) p.resolve(m.result);
    else {
      var e = new Error((m.error && m.error.detail) || "failed");
      e.code = (m.error && m.error.code) || "failed";
      e.status = m.error && m.error.status;
      p.reject(e);
    }
  });

  var moat = {
    context: null,
    // ready resolves with the context once the console has sent it.
    ready: ready,
    // call invokes an action of this page's module with input (an
    // object, sent as JSON; a string as it is). It resolves with the
    // output, parsed as JSON when it is JSON, and rejects with an Error
    // whose code is the API's (denied, not_found, cancelled, ...).
    call: function (action, input) {
      var body = typeof input === "string" ? input : JSON.stringify(input === undefined ? {} : input);
      return send({ type: "call", action: String(action), input: body }).then(function (out) {
        try { return JSON.parse(out); } catch (e) { return out; }
      });
    },
    // confirm asks the person, in the console, and resolves true when
    // they confirm.
    confirm: function (text) {
      return send({ type: "confirm", text: String(text) }).then(function (yes) { return yes === true; });
    },
    // mediaURL resolves with a signed URL of a media item of the
    // organization, for an <img> of the page.
    mediaURL: function (id) {
      return send({ type: "media", media: String(id) });
    }
  };
  window.moat = moat;
  window.parent.postMessage({ moat: PROTOCOL, id: 0, type: "hello" }, "*");
})();
