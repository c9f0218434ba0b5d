// The dashboard's only script: fetch the live part again every few seconds and put it
// in place. No framework; with scripts off the page is still whole, just not live.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const every = 1000 * Number(live.dataset.refresh || "5");
  async function refresh() {
    try {
      const answer = await fetch("/dashboard/live", {credentials: "same-origin", cache: "no-store"});
      if (answer.status === 401) { window.location.assign("/dashboard/login"); return; }
      if (answer.ok) {
        live.innerHTML = await answer.text();
        live.dataset.updated = String(Date.now());
      }
    } catch (e) {
      // the server is restarting: keep what is shown, try again later
    }
  }
  setInterval(refresh, every);
})();
