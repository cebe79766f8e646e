// convstore serve: the page's only script (served from /static/app.js; the CSP allows no other).
// It loads the replay and pressure panes, polls the conversation's version so that
// appended messages show within a second, and lines the replay up with the transcript:
// selecting a message selects its wire message (and the other way round). Every piece of HTML
// it inserts was escaped by the server.
"use strict";
(function () {
  const main = document.getElementById("conversation");
  if (!main) return;
  const conv = main.dataset.conv;
  const query = main.dataset.query;
  let version = main.dataset.version;

  // The replay first, then the pressure chart (it tokenizes the whole replay): each pane
  // shows as soon as its own fetch is done.
  let loading = false;
  let again = false;
  async function loadSide() {
    if (loading) { again = true; return; }  // one load at a time; the newest wins after
    loading = true;
    for (const id of ["replay", "pressure"]) {
      const pane = document.getElementById(id);
      if (!pane || !pane.dataset.src) continue;
      try {
        const r = await fetch(pane.dataset.src, { credentials: "same-origin", cache: "no-store" });
        pane.innerHTML = await r.text();
        pane.dataset.loaded = version;
        if (id === "replay" && selected) select(selected, false, false);
      } catch (e) {
        pane.textContent = "This pane could not be loaded.";
      }
    }
    loading = false;
    if (again) { again = false; loadSide(); }
  }

  async function poll() {
    try {
      const r = await fetch("/c/" + conv + "/version", { cache: "no-store" });
      if (r.ok) {
        const seen = String((await r.json()).version);
        if (seen !== version) {
          version = seen;
          main.dataset.version = seen;
          const page = document.querySelector("#transcript .page");
          if (page && page.dataset.last === "1") {
            const t = await fetch("/c/" + conv + "/transcript?" + query, { cache: "no-store" });
            if (t.ok) {
              document.getElementById("transcript").innerHTML = await t.text();
              if (selected) select(selected, false, false);
            }
          }
          loadSide();
        }
      }
    } catch (e) {
      // The server went away for a moment: keep polling.
    }
    setTimeout(poll, 400);
  }

  // Selection: a message's section is id m-ID; a wire message names the sections it is in
  // data-for. The selection outlives the panes' reloads.
  let selected = null;
  function select(messageId, scrollWire, scrollMessage) {
    selected = messageId;
    for (const el of document.querySelectorAll(".selected")) el.classList.remove("selected");
    const section = document.getElementById(messageId);
    if (section) section.classList.add("selected");
    const wire = Array.from(document.querySelectorAll("#replay .wire")).find(
      (w) => w.dataset.for.split(" ").includes(messageId));
    const note = document.getElementById("wire-note");
    if (wire) {
      wire.classList.add("selected");
      if (scrollWire) wire.scrollIntoView({ block: "nearest" });
      if (note) note.textContent = "";
    } else if (note && section) {
      note.textContent = "The selected message is not sent: a rewind withdrew it, or a " +
        "compaction's summary stands in its place.";
    }
    if (section && scrollMessage) section.scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("click", (event) => {
    if (event.target.closest("a")) return;  // a link does what links do
    const section = event.target.closest("#transcript section.msg");
    if (section) { select(section.id, true, false); return; }
    const wire = event.target.closest("#replay .wire");
    if (wire && wire.dataset.for) select(wire.dataset.for.split(" ")[0], false, true);
  });
  loadSide();
  setTimeout(poll, 400);
})();
