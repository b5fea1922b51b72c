// The notes page: lists the signed-in person's notes (the host answers
// each user their own), adds one, searches them, and deletes one after a
// confirmation the console shows. Everything goes through moat.call
// (moat-page.js); everything shown is text, never HTML.
"use strict";
const $ = (s) => document.querySelector(s);

function show(notes) {
  const ul = $("#notes");
  ul.replaceChildren();
  $("#empty").hidden = notes.length > 0;
  for (const n of notes) {
    const li = document.createElement("li");
    const title = document.createElement("strong");
    title.textContent = n.title;
    const body = document.createElement("span");
    body.className = "body";
    body.textContent = n.body || n.snippet || "";
    const del = document.createElement("button");
    del.className = "ghost delete";
    del.textContent = "Delete";
    del.addEventListener("click", () => remove(n));
    li.append(title, body, del);
    li.dataset.id = n.id;
    ul.append(li);
  }
}

async function run(f) {
  $("#error").textContent = "";
  try { await f(); } catch (e) { $("#error").textContent = (e.code ? e.code + ": " : "") + e.message; }
}

const refresh = () => run(async () => show((await moat.call("list", { limit: 100 })).notes));

async function remove(n) {
  if (!(await moat.confirm("Delete the note \u201c" + n.title + "\u201d?"))) return;
  await run(async () => { await moat.call("delete", { id: n.id }); await refresh(); });
}

// A sandboxed page submits no forms: buttons and Enter call the actions.
$("#add").addEventListener("click", () => run(async () => {
  const title = $("#title").value.trim();
  if (!title) { $("#error").textContent = "A note needs a title."; return; }
  const note = { title };
  if ($("#body").value.trim()) note.body = $("#body").value.trim();
  await moat.call("create", note);
  $("#title").value = ""; $("#body").value = "";
  await refresh();
}));
$("#title").addEventListener("keydown", (e) => { if (e.key === "Enter") $("#add").click(); });
$("#search").addEventListener("click", () => run(async () => {
  const q = $("#q").value.trim();
  if (!q) return refresh();
  show((await moat.call("search", { q, limit: 20 })).hits);
}));
$("#q").addEventListener("keydown", (e) => { if (e.key === "Enter") $("#search").click(); });
$("#clear").addEventListener("click", () => { $("#q").value = ""; refresh(); });

moat.ready.then((who) => { $("#who").textContent = "Signed in as " + who.user + "@" + who.org; refresh(); });
