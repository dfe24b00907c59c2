// "Your requests waiting now" on /me/: the signed-in person's waiting requests, their places and
// wait estimates, from /me/queue.json every two seconds while the page is visible.
"use strict";

(function () {
  const PERIOD_MS = 2000;

  function cell(text, numeric) {
    const td = document.createElement("td");
    if (numeric) td.className = "num";
    td.textContent = text;
    return td;
  }

  function seconds(s) {
    return s < 60 ? `${Math.round(s)} s` : `${Math.round(s / 60)} min`;
  }

  function show(requests) {
    const rows = requests.map((r) => {
      const tr = document.createElement("tr");
      const id = document.createElement("th");
      id.scope = "row";
      const code = document.createElement("code");
      code.textContent = r.id;
      id.appendChild(code);
      tr.append(id, cell(r.model), cell(String(r.position), true), cell(seconds(r.waited_seconds), true),
        cell(r.estimated_wait));
      return tr;
    });
    document.getElementById("my-queue-rows").replaceChildren(...rows);
    document.getElementById("my-queue-table").hidden = rows.length === 0;
    const none = document.getElementById("my-queue-none");
    none.textContent = "None of your requests is waiting.";
    none.hidden = rows.length !== 0;
  }

  async function refresh(url) {
    if (document.visibilityState === "visible") {
      try {
        const response = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
        if (response.ok) show((await response.json()).requests);
      } catch (_) { /* the next turn tries again */ }
    }
    setTimeout(() => refresh(url), PERIOD_MS);
  }

  document.addEventListener("DOMContentLoaded", () => {
    const section = document.getElementById("my-queue");
    if (section) refresh(section.dataset.url);
  });
})();
