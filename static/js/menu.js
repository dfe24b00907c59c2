// On a narrow screen the site's navigation folds behind a Menu button; without script it stays
// open (the button only shows once this has run). The CSS decides what "narrow" is.
(() => {
  const header = document.querySelector("header.site");
  const button = header && header.querySelector("button.menu");
  if (!button) return;
  header.classList.add("foldable");
  button.addEventListener("click", () => {
    button.setAttribute("aria-expanded", String(button.getAttribute("aria-expanded") !== "true"));
  });
})();
