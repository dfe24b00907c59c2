// The staff keys page: in flight and queued refresh every few seconds, as on the capacity page,
// for the keys this page shows. Polls slowly while the tab is hidden.
"use strict";

(function () {
  const FAST_MS = 5000;
  const SLOW_MS = 60000;
  const table = document.querySelector("table[data-load-url]");
  if (!table) return;
  const rows = new Map([...table.querySelectorAll("tr[data-prefix]")].map((tr) => [tr.dataset.prefix, tr]));
  if (!rows.size) return;
  const status = document.getElementById("keys-status");
  let timer = null;

  async function refresh() {
    const query = new URLSearchParams([...rows.keys()].map((prefix) => ["prefix", prefix]));
    try {
      const response = await fetch(`${table.dataset.loadUrl}?${query}`, { credentials: "same-origin" });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const { keys } = await response.json();
      for (const [prefix, tr] of rows) {
        const figures = keys[prefix] || { in_flight: 0, queued: 0 };
        for (const cell of tr.querySelectorAll("[data-figure]")) {
          const value = String(figures[cell.dataset.figure]);
          if (cell.textContent !== value) cell.textContent = value;
        }
      }
      status.classList.remove("stale");
      status.textContent = "; they refresh every few seconds";
    } catch (err) {
      status.classList.add("stale");
      status.textContent = "; the last refresh failed, retrying";
    }
    schedule();
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, document.hidden ? SLOW_MS : FAST_MS);
  }

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh();
    else schedule();
  });
  schedule();
})();
