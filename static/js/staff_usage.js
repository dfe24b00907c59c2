// The staff usage report's chart: weighted tokens per group, prompt and completion stacked, from
// the page's JSON data island (the server aggregates; the report does not change, so no polling).
"use strict";

(function () {
  const COLORS = { prompt: "#9db8e0", completion: "#1a7f37" };
  const island = document.getElementById("usage-chart-data");
  if (!island || typeof Plotly === "undefined") return;
  const data = JSON.parse(island.textContent);
  if (!data.labels.length) return;
  // Largest first, top down: a horizontal bar chart lists its first category at the bottom.
  const labels = data.labels.slice().reverse();
  const bar = (values, name, color) => ({
    y: labels, x: values.slice().reverse(), type: "bar", orientation: "h", name, marker: { color },
    hovertemplate: "%{y}: %{x:,.0f}<extra>" + name + "</extra>",
  });
  Plotly.react("chart-usage", [
    bar(data.prompt, "prompt (weighted)", COLORS.prompt),
    bar(data.completion, "completion (weighted)", COLORS.completion),
  ], {
    height: 90 + 26 * labels.length,
    margin: { l: 8, r: 16, t: 32, b: 44 },
    barmode: "stack",
    xaxis: { title: { text: "weighted tokens" }, rangemode: "tozero", fixedrange: true },
    yaxis: { automargin: true, fixedrange: true },
    legend: { orientation: "h", x: 0, y: 1, yanchor: "bottom", traceorder: "normal" },
    font: { family: "system-ui, sans-serif", size: 12 },
  }, { displayModeBar: false, responsive: true });
})();
