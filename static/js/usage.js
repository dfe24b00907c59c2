// The "my usage" page: requests and tokens per day, drawn from /me/usage/daily.json. Daily
// figures change slowly, so the page loads them once and does not poll.
"use strict";

(function () {
  const COLORS = { requests: "#1f5fbf", prompt: "#9db8e0", completion: "#1a7f37" };
  const config = { displayModeBar: false, responsive: true };

  function layout(title) {
    return {
      margin: { l: 56, r: 16, t: 8, b: 36 },
      xaxis: { type: "date", fixedrange: true, tickformat: "%b %d" },
      yaxis: { title: { text: title }, rangemode: "tozero", fixedrange: true },
      legend: { orientation: "h", x: 0, y: 1.12, traceorder: "normal" },
      barmode: "stack",
      font: { family: "system-ui, sans-serif", size: 12 },
    };
  }

  async function draw() {
    if (typeof Plotly === "undefined") return;
    const response = await fetch(document.getElementById("daily-url").href, { headers: { Accept: "application/json" } });
    if (!response.ok) return;
    const daily = await response.json();
    Plotly.react("chart-requests", [
      { x: daily.days, y: daily.requests, type: "bar", name: "requests", marker: { color: COLORS.requests } },
    ], layout("requests"), config);
    Plotly.react("chart-tokens", [
      { x: daily.days, y: daily.prompt_tokens, type: "bar", name: "prompt tokens", marker: { color: COLORS.prompt } },
      { x: daily.days, y: daily.completion_tokens, type: "bar", name: "completion tokens", marker: { color: COLORS.completion } },
    ], layout("tokens"), config);
  }

  draw();
})();
