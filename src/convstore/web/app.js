// convstore serve: the page's only script (served from /static/app.js; the CSP allows no other).
// It loads the replay pane, and polls the conversation's version so that appended messages
// show within a second. Every piece of HTML it inserts was escaped by the server.
"use strict";
(function () {
  const main = document.getElementById("conversation");
  if (!main) return;
  const conv = main.dataset.conv;
  const query = main.dataset.query;
  let version = main.dataset.version;

  function loadSide() {
    const side = document.getElementById("side");
    if (!side || !side.dataset.src) return;
    fetch(side.dataset.src, { credentials: "same-origin" })
      .then((r) => r.text())
      .then((html) => { side.innerHTML = html; side.dataset.loaded = version; })
      .catch(() => { side.textContent = "The replay could not be loaded."; });
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
