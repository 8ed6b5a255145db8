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
