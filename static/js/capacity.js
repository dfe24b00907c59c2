// The capacity page: re-renders from /api/capacity and /api/capacity/series every few seconds.
// The server renders the first view; this keeps it current without a reload, and polls
// slowly while the tab is hidden so an idle open tab costs the portal next to nothing.
"use strict";

(function () {
  const FAST_MS = 5000;
  const SLOW_MS = 60000;
  const SPAN_MS = { hour: 3600e3, day: 86400e3 };
  // The series' bucket widths (fairness/api.py); missing buckets beyond a few mean no polls.
  const BUCKET_MS = { hour: 10e3, day: 300e3 };
  const COLORS = { running: "#1f5fbf", waiting: "#d9822b", tokens: "#1a7f37" };

  const initial = JSON.parse(document.getElementById("capacity-initial").textContent);
  const alertKinds = initial.alert_kinds;
  let chartWindow = "hour";
  let timer = null;
  let busy = false;
  const CALM = "None open. An alert opens when requests keep waiting while every slot is busy: a " +
    "queue that is always full is a capacity decision, not a fairness problem. Requests held by " +
    "their own tier's limits beside free slots are shown above, not alerted on.";

  // Formatting mirrors fairness/templatetags/figures.py, so a refresh does not reflow the page.
  const rate = (v) => (v == null ? "–" : v >= 10 || v === 0 ? Math.round(v).toLocaleString("en-US") : v.toFixed(1));
  const count = (v) => (v == null ? "–" : String(Math.round(v * 10) / 10));
  const percent = (v) => (v == null ? "–" : Math.round(100 * v) + "%");
  const perCent = (v) => (v == null ? "–" : Math.round(v) + "%");
  const gib = (mib, unit = true) => {
    const v = mib / 1024;
    const figure = v < 100 ? v.toFixed(1) : Math.round(v).toLocaleString("en-US");
    return unit ? `${figure} GiB` : figure;
  };
  const gibOf = (used, total) => (used == null ? "–" : total ? `${gib(used, false)} of ${gib(total)}` : gib(used));
  const watts = (v) => (v == null ? "–" : `${Math.round(v).toLocaleString("en-US")} W`);
  const celsius = (v) => (v == null ? "–" : `${Math.round(v)} °C`);
  const utc = (iso) => iso.replace(/(Z|[+-]\d\d:\d\d)$/, ""); // charts read naive times as-is
  const clock = (iso) => new Date(iso).toISOString().slice(11, 19);
  const minute = (iso) => new Date(iso).toISOString().slice(0, 16).replace("T", " ");

  // Builds an element; string children become text nodes, so no value is parsed as HTML.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    node.append(...children.filter((c) => c != null));
    return node;
  }

  function text(id, value) {
    document.getElementById(id).textContent = value;
  }

  // As fairness/telemetry/latency.py's ms_in_words.
  const ms = (v) => (v == null ? "–" : v < 1000 ? `${v} ms`
    : v < 10000 ? `${(v / 1000).toFixed(1)} s` : `${Math.round(v / 1000).toLocaleString("en-US")} s`);

  function basis(m) {
    const measured = m.basis === "curve"
      ? `Measured from ${m.samples} busy moments of the last hour.`
      : `Measured from ${m.samples} busy moments of the last hour, all at a similar load: figures ` +
        "for loads not seen yet follow how such cards usually slow down as they fill.";
    const replicas = m.serving_replicas === 1 ? "replica" : "replicas";
    return `${measured} Counts the ${m.serving_replicas} ${replicas} taking new requests now.`;
  }

  function renderModels(models) {
    const sections = models.map((m, i) => {
      const section = el("section", { class: "card model", "aria-labelledby": `model-${i + 1}` },
        el("h2", { id: `model-${i + 1}` }, "Model ", el("code", {}, m.model)),
        el("p", { class: "sentence" }, m.sentence));
      if (m.per_user.length) {
        section.append(
          el("table", { class: "per-user" },
            el("caption", {}, "Expected tokens per second for each user, by number of users at once"),
            el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Users at once"),
              el("th", { scope: "col" }, "Each user, tok/s"))),
            el("tbody", {}, ...m.per_user.map((p) => el("tr", {},
              el("th", { scope: "row" }, String(p.users)), el("td", {}, rate(p.tokens_per_second)))))),
          el("p", { class: "basis" }, basis(m)));
      }
      return section;
    });
    if (!sections.length) {
      sections.push(el("section", { class: "card model" },
        el("p", { class: "sentence" }, "No capacity figures have been published yet.")));
    }
    document.getElementById("models").replaceChildren(...sections);
  }

  function state(r) {
    if (!r.healthy) return el("span", { class: "health down" }, "down");
    if (r.draining) return el("span", { class: "health draining" }, "draining");
    return el("span", { class: "health ok" }, "serving");
  }

  function renderNow(totals, replicas, tiers, batch) {
    text("running", count(totals.running));
    text("waiting", count(totals.waiting_engine + totals.waiting_gateway));
    text("waiting-detail",
      `${count(totals.waiting_gateway)} in the gateway’s queue, ${count(totals.waiting_engine)} in the engines`);
    text("generation", rate(totals.generation_tps));
    text("replicas-healthy", `${totals.replicas_serving} of ${totals.replicas}`);
    const note = document.getElementById("queue-note");
    note.className = `queue-note ${totals.queue_status}`;
    note.textContent = totals.queue_note;
    text("batch-work", batch.sentence);
    document.getElementById("tier-waits").replaceChildren(...tiers.map((t) => el("tr", {},
      el("th", { scope: "row" }, t.name), el("td", { class: "num" }, String(t.waiting)),
      el("td", {}, t.expected_wait))));
    const rows = replicas.map((r) => el("tr", {},
      el("th", { scope: "row" }, r.name),
      el("td", {}, el("code", {}, r.model)),
      el("td", {}, state(r)),
      el("td", { class: "num" }, `${count(r.running)} / ${r.max_num_seqs}`),
      el("td", { class: "num" }, count(r.waiting)),
      el("td", { class: "num" }, percent(r.kv_usage)),
      el("td", { class: "num" }, rate(r.generation_tps)),
      el("td", { class: "num" }, percent(r.prefix_hit_rate))));
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "8" }, "No replica has been polled yet.")));
    document.getElementById("replica-rows").replaceChildren(...rows);
    renderGpus(replicas.filter((r) => r.gpu));
  }

  // Only the replicas that name a GPU exporter; none of them: no GPU table at all.
  function renderGpus(replicas) {
    document.getElementById("gpu-figures").hidden = !replicas.length;
    document.getElementById("gpu-rows").replaceChildren(...replicas.map((r) => el("tr", {},
      el("th", { scope: "row" }, r.name),
      el("td", { class: "num" }, String(r.gpu.gpus)),
      el("td", { class: "num" }, perCent(r.gpu.utilization_percent)),
      el("td", { class: "num" }, gibOf(r.gpu.memory_used_mib, r.gpu.memory_total_mib)),
      el("td", { class: "num" }, watts(r.gpu.power_watts)),
      el("td", { class: "num" }, celsius(r.gpu.temperature_c)))));
  }

  function renderAlerts(alerts) {
    const items = alerts.map((a) => el("article", { class: "alert" },
      el("h3", {}, el("code", {}, a.model), `: ${alertKinds[a.kind] || a.kind}`),
      el("p", {}, a.summary),
      el("p", { class: "since" }, "Open since ",
        el("time", { datetime: a.opened_at }, `${minute(a.opened_at)} UTC`))));
    if (!items.length) {
      items.push(el("p", { class: "calm" }, CALM));
    }
    document.getElementById("alerts").replaceChildren(...items);
  }

  function renderTiers(tiers) {
    document.getElementById("tiers").replaceChildren(...tiers.map((t) => el("section",
      { class: "tier", "aria-labelledby": `tier-${t.name}` },
      el("h3", { id: `tier-${t.name}` }, t.name),
      t.description ? el("p", {}, t.description) : null,
      el("ul", { class: "policy" }, ...t.policy_sentences.map((line) => el("li", {}, line))))));
    document.getElementById("ttft-rows").replaceChildren(...tiers.map((t) => el("tr", {},
      el("th", { scope: "row" }, t.name), el("td", { class: "num" }, ms(t.ttft_p50_ms)),
      el("td", { class: "num" }, ms(t.ttft_p95_ms)), el("td", { class: "num" }, String(t.ttft_requests)))));
  }

  function render(capacity) {
    renderModels(capacity.models);
    renderNow(capacity.totals, capacity.replicas, capacity.tiers, capacity.batch_work);
    renderAlerts(capacity.alerts);
    renderTiers(capacity.tiers);
    const updated = document.getElementById("updated");
    updated.setAttribute("datetime", capacity.updated_at);
    updated.textContent = `${clock(capacity.updated_at)} UTC`;
  }

  let serverNow = initial.capacity.updated_at;

  function layout(title, series) {
    // The whole window, however young the portal: "last day" always spans the day.
    const end = new Date(serverNow).getTime();
    const start = end - SPAN_MS[series.window];
    const range = [new Date(start).toISOString(), new Date(end).toISOString()].map(utc);
    return {
      margin: { l: 56, r: 16, t: 8, b: 36 },
      xaxis: { type: "date", range, fixedrange: true },
      yaxis: { title: { text: title }, rangemode: "tozero", fixedrange: true },
      legend: { orientation: "h", x: 0, y: 1.12 },
      font: { family: "system-ui, sans-serif", size: 12 },
      annotations: series.t.length ? [] : [{ text: "No samples yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5 }],
    };
  }

  // A null where polling stopped, so the line breaks rather than bridging the outage.
  function withGaps(series) {
    const out = { window: series.window, t: [], running: [], waiting: [], generation_tps: [] };
    series.t.forEach((t, i) => {
      if (i > 0 && new Date(t) - new Date(series.t[i - 1]) > 3 * BUCKET_MS[series.window]) {
        out.t.push(t);
        for (const name of ["running", "waiting", "generation_tps"]) out[name].push(null);
      }
      out.t.push(t);
      for (const name of ["running", "waiting", "generation_tps"]) out[name].push(series[name][i]);
    });
    return out;
  }

  function drawCharts(raw) {
    if (typeof Plotly === "undefined" || raw.window !== chartWindow) return;
    const series = withGaps(raw);
    const x = series.t.map(utc);
    // A handful of points reads better as dots than as a line that seems to start from nothing.
    const mode = x.length < 30 ? "lines+markers" : "lines";
    const config = { displayModeBar: false, responsive: true };
    Plotly.react("chart-queue", [
      { x, y: series.running, name: "running", mode, line: { color: COLORS.running } },
      { x, y: series.waiting, name: "waiting (engines + gateway queue)", mode, line: { color: COLORS.waiting } },
    ], layout("requests", series), config);
    Plotly.react("chart-throughput", [
      { x, y: series.generation_tps, name: "tokens generated per second", mode, line: { color: COLORS.tokens } },
    ], layout("tok/s", series), config);
  }

  async function getJSON(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    if (!response.ok) throw new Error(`${url}: ${response.status}`);
    return response.json();
  }

  const seriesURL = () => `/api/capacity/series?window=${chartWindow}`;

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, document.hidden ? SLOW_MS : FAST_MS);
  }

  async function refresh() {
    if (busy) return; // the request in flight schedules the next one
    busy = true;
    const status = document.getElementById("status");
    try {
      const [capacity, series] = await Promise.all([getJSON("/api/capacity"), getJSON(seriesURL())]);
      serverNow = capacity.updated_at;
      render(capacity);
      drawCharts(series);
      status.classList.remove("stale");
      status.firstChild.textContent = "Updated ";
    } catch (err) {
      status.classList.add("stale");
      status.firstChild.textContent = "Could not reach the portal; retrying. Last updated ";
    } finally {
      busy = false;
      schedule();
    }
  }

  for (const button of document.querySelectorAll("[data-window]")) {
    button.addEventListener("click", async () => {
      chartWindow = button.dataset.window;
      for (const b of document.querySelectorAll("[data-window]")) {
        b.setAttribute("aria-pressed", String(b === button));
      }
      try {
        drawCharts(await getJSON(seriesURL()));
      } catch (err) {
        // The next regular refresh tries again.
      }
    });
  }

  document.addEventListener("visibilitychange", () => (document.hidden ? schedule() : refresh()));

  drawCharts(initial.series);
  schedule();
})();
