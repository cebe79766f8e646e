// convstore serve: the page's only script (served from /static/app.js; the CSP allows no other).
// It loads the replay and pressure panes, and polls the conversation's version so that
// appended messages show within a second. Every piece of HTML it inserts was escaped by the
// server.
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
            if (t.ok) document.getElementById("transcript").innerHTML = await t.text();
          }
          loadSide();
        }
      }
    } catch (e) {
      // The server went away for a moment: keep polling.
    }
    setTimeout(poll, 400);
  }

  loadSide();
  setTimeout(poll, 400);
})();
