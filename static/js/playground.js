// /me/playground/: a chat with a model, streamed from /v1/chat/completions on this origin with
// the session's playground key. The key comes from a same-origin POST (with the CSRF token) and
// lives in this closure only: never in the page, a URL or the browser's storage.
"use strict";

(function () {
  let key = null;
  let history = [];
  let controller = null;

  const $ = (id) => document.getElementById(id);

  function say(text) {
    $("pg-status").textContent = text;
  }

  function fail(text) {
    $("pg-error").textContent = text;
  }

  async function errorOf(response) {
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) return body.error.message;
    } catch (_) { /* not JSON: the status says enough */ }
    return `The request failed (HTTP ${response.status}).`;
  }

  async function fetchKey(url, csrf) {
    const response = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "X-CSRFToken": csrf, Accept: "application/json" },
    });
    if (!response.ok) throw new Error(await errorOf(response));
    return (await response.json()).key;
  }

  async function chatModels() {
    const response = await fetch("/v1/models", { headers: { Authorization: `Bearer ${key}` } });
    if (!response.ok) throw new Error(await errorOf(response));
    return (await response.json()).data.filter((m) => !m.kind || m.kind === "chat").map((m) => m.id);
  }

  function turn(role, label, text) {
    const box = document.createElement("div");
    box.className = `turn ${role}`;
    const who = document.createElement("p");
    who.className = "who";
    who.textContent = label;
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
    box.append(who, body);
    $("pg-transcript").append(box);
    $("pg-transcript").hidden = false;
    follow();
    return box;
  }

  // The conversation keeps its newest words in view, unless its reader has scrolled back.
  function nearEnd() {
    const log = $("pg-transcript");
    return log.scrollHeight - log.scrollTop - log.clientHeight < 48;
  }

  function follow() {
    const log = $("pg-transcript");
    log.scrollTop = log.scrollHeight;
  }

  function figuresOf(startedAt, firstAt, endedAt, tokens) {
    if (firstAt === null) return "No answer came.";
    const ttft = (firstAt - startedAt) / 1000;
    const decoding = (endedAt - firstAt) / 1000;
    let words = `First token after ${ttft.toFixed(2)} s`;
    if (tokens > 1 && decoding > 0) {
      // The first token ends the wait; the rest came over `decoding` seconds.
      words += ` · ${((tokens - 1) / decoding).toFixed(1)} tokens per second`;
    }
    return tokens ? `${words} (${tokens} token${tokens === 1 ? "" : "s"})` : words;
  }

  function queuedWords(comment) {
    const position = /position=(\d+)/.exec(comment);
    const eta = /eta_ms=(\d+)/.exec(comment);
    if (!position) return "";
    // The requests admission grants first; 0 when this one's slot has come.
    const ahead = Number(position[1]);
    if (ahead === 0) return "A slot is free: starting…";
    const seconds = eta ? Math.max(1, Math.round(Number(eta[1]) / 1000)) : null;
    return `Waiting for a free slot: ${ahead} ahead${seconds ? `, about ${seconds} s` : ""}.`;
  }

  // Reads the server-sent events; returns the completion's token count when the engine said it.
  async function readStream(response, onText) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let tokens = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of event.split("\n")) {
          if (line.startsWith(":")) {
            const words = queuedWords(line);
            if (words) say(words);
            continue;
          }
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return tokens;
          const chunk = JSON.parse(data);
          if (chunk.error) throw new Error(chunk.error.message || "The answer broke off.");
          if (chunk.usage && chunk.usage.completion_tokens) tokens = chunk.usage.completion_tokens;
          const text = chunk.choices && chunk.choices[0] && chunk.choices[0].delta && chunk.choices[0].delta.content;
          if (text) onText(text);
        }
      }
    }
    return tokens;
  }

  function busy(on) {
    $("pg-send").disabled = on;
    $("pg-stop").disabled = !on;
    $("pg-transcript").setAttribute("aria-busy", on ? "true" : "false");
  }

  async function send(event) {
    event.preventDefault();
    const text = $("pg-message").value.trim();
    const model = $("pg-model").value;
    if (!text || !model || controller) return;
    fail("");
    history.push({ role: "user", content: text });
    turn("user", "You", text);
    $("pg-message").value = "";
    const answer = turn("assistant", model, "");
    const body = answer.querySelector(".text");
    let reply = "";
    let firstAt = null;
    controller = new AbortController();
    busy(true);
    say("Sent…");
    const startedAt = performance.now();
    let tokens = 0;
    try {
      const response = await fetch("/v1/chat/completions", {
        method: "POST", signal: controller.signal,
        headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
        body: JSON.stringify({ model, messages: history, stream: true, stream_options: { include_usage: true } }),
      });
      if (!response.ok) {
        const message = await errorOf(response);
        throw new Error(response.status === 401
          ? `${message} This page's key has ended (signed out, revoked or expired): reload the page.` : message);
      }
      tokens = await readStream(response, (piece) => {
        if (firstAt === null) { firstAt = performance.now(); say(""); }
        const atEnd = nearEnd();
        reply += piece;
        body.textContent = reply;
        if (atEnd) follow();
      });
    } catch (error) {
      if (error.name === "AbortError") reply += reply ? " …" : "";
      else fail(error.message);
    } finally {
      const endedAt = performance.now();
      controller = null;
      busy(false);
      say("");
      if (reply) history.push({ role: "assistant", content: reply });
      else answer.remove();
      if (firstAt !== null) {
        const figures = document.createElement("p");
        figures.className = "detail figures";
        figures.textContent = figuresOf(startedAt, firstAt, endedAt, tokens);
        answer.append(figures);
        follow();
      }
      $("pg-message").focus();
    }
  }

  function clear() {
    if (controller) controller.abort();
    history = [];
    $("pg-transcript").replaceChildren();
    $("pg-transcript").hidden = true;
    fail("");
    $("pg-message").focus();
  }

  async function start(section) {
    const form = $("pg-form");
    try {
      key = await fetchKey(section.dataset.keyUrl, form.elements.csrfmiddlewaretoken.value);
      const models = await chatModels();
      if (!models.length) {
        say("No chat model is open to your tier just now: the capacity page lists what is served.");
        return;
      }
      $("pg-model").replaceChildren(...models.map((id) => new Option(id, id)));
    } catch (error) {
      say("");
      fail(error.message);
      return;
    }
    say("");
    form.hidden = false;
    form.addEventListener("submit", send);
    $("pg-stop").addEventListener("click", () => controller && controller.abort());
    $("pg-clear").addEventListener("click", clear);
    $("pg-message").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const section = $("playground");
    if (section) start(section);
  });
})();
