/*! The bundled packages (CodeMirror 6, Lezer, style-mod, w3c-keyname,
 * find-cluster-break; exact versions in package-lock.json) are
 * Copyright (C) 2016-2024 by Marijn Haverbeke <marijn@haverbeke.berlin> and others,
 * under the MIT License:
 *
 * Permission is hereby granted, free of charge, to any person obtaining a copy
 * of this software and associated documentation files (the "Software"), to deal
 * in the Software without restriction, including without limitation the rights
 * to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 * copies of the Software, and to permit persons to whom the Software is
 * furnished to do so, subject to the following conditions:
 *
 * The above copyright notice and this permission notice shall be included in
 * all copies or substantial portions of the Software.
 *
 * THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 * IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 * FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 * AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 * LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 * OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN
 * THE SOFTWARE.
 */
// The console's code editor: CodeMirror 6 with the language modes of the
// languages moat runs, exposed to app.js as window.MoatEditor. esbuild
// bundles this file and its pinned dependencies into ../editor.js
// (`make console-editor`); the server embeds that file, so the console
// loads no script from anywhere but its own origin.
import { EditorState, Compartment, Prec } from "@codemirror/state";
import { EditorView, keymap, lineNumbers, highlightActiveLine, highlightActiveLineGutter, drawSelection } from "@codemirror/view";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { syntaxHighlighting, defaultHighlightStyle, bracketMatching, indentOnInput, StreamLanguage, indentUnit } from "@codemirror/language";
import { python } from "@codemirror/lang-python";
import { javascript } from "@codemirror/lang-javascript";
import { cpp } from "@codemirror/lang-cpp";
import { rust } from "@codemirror/lang-rust";
import { go } from "@codemirror/lang-go";
import { ruby } from "@codemirror/legacy-modes/mode/ruby";
import { shell } from "@codemirror/legacy-modes/mode/shell";
import { java, kotlin } from "@codemirror/legacy-modes/mode/clike";
import { lua } from "@codemirror/legacy-modes/mode/lua";
import { perl } from "@codemirror/legacy-modes/mode/perl";

// modes maps a moat language name (GET /v1/languages) to its CodeMirror
// support. A language without one is edited as plain text: PHP, whose
// mode (@codemirror/lang-php) would bring HTML's, CSS's and its own
// parsers into the bundle for one language.
const modes = {
  python: () => python(),
  "python3-native": () => python(),
  javascript: () => javascript(),
  assemblyscript: () => javascript({ typescript: true }),
  c: () => cpp(),
  cpp: () => cpp(),
  rust: () => rust(),
  go: () => go(),
  ruby: () => StreamLanguage.define(ruby),
  bash: () => StreamLanguage.define(shell),
  typescript: () => javascript({ typescript: true }),
  java: () => StreamLanguage.define(java),
  kotlin: () => StreamLanguage.define(kotlin),
  lua: () => StreamLanguage.define(lua),
  perl: () => StreamLanguage.define(perl),
};

function modeFor(name) {
  const m = modes[name];
  return m ? m() : [];
}

// theme sizes the editor and sets its font; the page's stylesheet does
// not reach into the shadow root.
const theme = EditorView.theme({
  "&": { minHeight: "280px", maxHeight: "560px", fontSize: "13px", backgroundColor: "#fff" },
  "&.cm-focused": { outline: "2px solid #bcd0ff" },
  ".cm-scroller": { fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace", minHeight: "280px", overflow: "auto" },
});

// create puts an editor into a shadow root of host. CodeMirror styles
// itself with style sheets it builds at run time: in a document it puts
// them in a <style> element, which the console's CSP (style-src 'self',
// no 'unsafe-inline', no nonce) refuses; in a shadow root it adopts
// constructed style sheets (adoptedStyleSheets), which no inline style
// source is involved in. onChange is called after each edit the user
// makes (not after setValue); onRun when the user presses Ctrl+Enter
// (Cmd+Enter on a Mac).
function create(host, opts) {
  const parent = host.shadowRoot || host.attachShadow({ mode: "open" });
  const lang = new Compartment();
  let quiet = false;
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: opts.doc || "",
      extensions: [
        theme, lineNumbers(), highlightActiveLineGutter(), highlightActiveLine(), drawSelection(), history(),
        indentOnInput(), bracketMatching(), indentUnit.of("    "),
        syntaxHighlighting(defaultHighlightStyle, { fallback: true }),
        // Mod-Enter (Ctrl or Cmd) runs, ahead of the default keymap's
        // insertBlankLine.
        Prec.highest(keymap.of([{ key: "Mod-Enter", run: () => { if (opts.onRun) opts.onRun(); return !!opts.onRun; } }])),
        keymap.of([...defaultKeymap, ...historyKeymap, indentWithTab]),
        EditorView.contentAttributes.of({ "aria-label": opts.label || "Source" }),
        lang.of(modeFor(opts.language)),
        EditorView.updateListener.of((u) => { if (u.docChanged && !quiet && opts.onChange) opts.onChange(); }),
      ],
    }),
  });
  return {
    view,
    getValue: () => view.state.doc.toString(),
    setValue(text) {
      quiet = true;
      try { view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } }); } finally { quiet = false; }
    },
    setLanguage(name) { view.dispatch({ effects: lang.reconfigure(modeFor(name)) }); },
    hasMode: (name) => Object.prototype.hasOwnProperty.call(modes, name),
    focus: () => view.focus(),
  };
}

// textOf is the text of the editor create put into host, or null: what a
// test or a script on the page reads instead of the DOM, which holds
// only the lines in view.
function textOf(host) {
  const dom = host && host.shadowRoot && host.shadowRoot.querySelector(".cm-editor");
  const view = dom && EditorView.findFromDOM(dom);
  return view ? view.state.doc.toString() : null;
}

window.MoatEditor = { create, textOf, languages: Object.keys(modes) };
