// The key-issued page: copies the secret shown once to the clipboard. The secret stays in the
// page; nothing here stores it. The button shows only when this script runs.
"use strict";

(function () {
  function selectText(node) {
    const range = document.createRange();
    range.selectNodeContents(node);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  for (const button of document.querySelectorAll("[data-copy]")) {
    const target = document.getElementById(button.dataset.copy);
    const status = document.getElementById(button.dataset.copyStatus);
    button.hidden = false;
    button.addEventListener("click", async () => {
      const text = target.textContent.trim();
      try {
        // Absent outside secure contexts (plain HTTP to a non-local host): then the fallback.
        await navigator.clipboard.writeText(text);
        status.textContent = "Copied to the clipboard.";
      } catch (err) {
        selectText(target);
        status.textContent = document.execCommand("copy")
          ? "Copied to the clipboard."
          : "Selected: press Ctrl+C (⌘C) to copy.";
      }
    });
  }
})();
