// Small progressive enhancements. Everything works without this file; it only makes
// times relative and keeps them fresh.
(function () {
  "use strict";
  const units = [["year", 31536000], ["month", 2592000], ["day", 86400], ["hour", 3600], ["minute", 60], ["second", 1]];
  const fmt = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
  function relative(iso) {
    const seconds = (new Date(iso).getTime() - Date.now()) / 1000;
    for (const [unit, size] of units) {
      if (Math.abs(seconds) >= size || unit === "second") return fmt.format(Math.round(seconds / size), unit);
    }
  }
  function refresh(root) {
    (root || document).querySelectorAll("time[data-relative]").forEach(function (el) {
      const iso = el.getAttribute("datetime");
      if (!iso) return;
      const text = relative(iso);
      if (el.textContent !== text) el.textContent = text;
      if (!el.title) el.title = new Date(iso).toLocaleString();
    });
  }
  window.portalRefreshTimes = refresh;
  // Every second, so "46 seconds ago" keeps counting.
  document.addEventListener("DOMContentLoaded", function () { refresh(); setInterval(refresh, 1000); });
  document.addEventListener("htmx:afterSettle", function (e) { refresh(e.target); });
  document.addEventListener("htmx:wsAfterMessage", function () { refresh(); });
})();

// Forms: after a refusal the page is rendered at the address the form posted to; put the
// page's own address back (a reload then shows the page, not a re-sent form), move focus
// to the first field with an error, and count characters in boxes with a limit before
// the limit cuts the text short.
(function () {
  "use strict";
  function keepAddress() {
    const canonical = document.querySelector('link[rel="canonical"]');
    if (!canonical || !window.history.replaceState) return;
    const url = new URL(canonical.href, window.location.href);
    if (url.pathname !== window.location.pathname) window.history.replaceState(null, "", url.pathname);
  }
  function focusFirstError() {
    const field = document.querySelector(".field.has-errors input:not([type=hidden]), .field.has-errors textarea, .field.has-errors select");
    if (field) { field.focus(); return; }
    const banner = document.querySelector("#decision-errors, #decision-refused");
    if (banner) { banner.setAttribute("tabindex", "-1"); banner.focus(); }
  }
  function counters(root) {
    (root || document).querySelectorAll("textarea[maxlength]").forEach(function (box) {
      if (box.dataset.counted) return;
      box.dataset.counted = "1";
      const limit = parseInt(box.getAttribute("maxlength"), 10);
      if (!limit) return;
      const out = document.createElement("p");
      out.className = "char-count help";
      out.id = (box.id || "box") + "-count";
      out.setAttribute("aria-live", "polite");
      box.setAttribute("aria-describedby", ((box.getAttribute("aria-describedby") || "") + " " + out.id).trim());
      box.insertAdjacentElement("afterend", out);
      const fmt = new Intl.NumberFormat("en");
      function update() {
        const used = box.value.length;
        out.textContent = fmt.format(used) + " of " + fmt.format(limit) + " characters";
        out.classList.toggle("near-limit", used >= limit * 0.9);
      }
      box.addEventListener("input", update);
      update();
    });
  }
  document.addEventListener("DOMContentLoaded", function () { keepAddress(); counters(); focusFirstError(); });
  document.addEventListener("htmx:afterSettle", function (e) { counters(e.target); });
})();
