// Keyboard shortcuts on the review queue and the decision page, listed on each page in
// its "Keyboard shortcuts" help. Keys act only outside text fields, and never with Ctrl,
// Alt or Meta held, so typing a note or using the browser's own shortcuts is untouched.
//
//   j / k   next / previous request (in the queue's order)
//   o       open the selected request (queue)
//   a / r   approve / reject (decision page: presses the form's own button; accept /
//           ignore on a request with typed answers, and the help names them so)
//   n       focus the note (decision page)
//   N       next request: the oldest one waiting for this reviewer (decision page)
//   Escape  leave the text field being typed in, so the keys above work again
//
// The queue remembers its order for the tab (sessionStorage) when a request is opened from
// it, so j / k on a decision page step through the same list; without one they lead back
// to the queue.
(function () {
  "use strict";

  const STORE = "portal.queueOrder";

  function typing(target) {
    if (!(target instanceof Element)) return false;
    if (target.isContentEditable) return true;
    const tag = target.tagName;
    if (tag === "TEXTAREA" || tag === "SELECT") return true;
    if (tag !== "INPUT") return false;
    // Keys pressed on a checkbox, radio or button do not type anything.
    return !["checkbox", "radio", "button", "submit", "reset"].includes(target.type);
  }

  function rows() {
    return Array.from(document.querySelectorAll("#queue-rows tr.queue-row:not([hidden])"));
  }

  function rowLink(row) {
    return row.querySelector(".queue-message a[href]") || row.querySelector("a[href]");
  }

  function remember() {
    const hrefs = rows().map(rowLink).filter(Boolean).map(function (a) { return a.pathname; });
    try { sessionStorage.setItem(STORE, JSON.stringify(hrefs)); } catch (e) { /* private mode */ }
  }

  function remembered() {
    try { return JSON.parse(sessionStorage.getItem(STORE) || "[]"); } catch (e) { return []; }
  }

  // --- the queue ------------------------------------------------------------------------
  let currentId = null;

  function select(row) {
    rows().forEach(function (r) { r.classList.toggle("kbd-current", r === row); });
    currentId = row.id;
    const link = rowLink(row);
    if (link) link.focus();
    row.scrollIntoView({ block: "nearest" });
  }

  function queueKey(key) {
    const all = rows();
    if (!all.length) return false;
    let at = all.findIndex(function (r) { return r.id === currentId; });
    if (at < 0) at = all.findIndex(function (r) { return r.contains(document.activeElement); });
    if (key === "j" || key === "k") {
      const step = key === "j" ? 1 : -1;
      const next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(Math.max(at + step, 0), all.length - 1);
      select(all[next]);
      return true;
    }
    if (key === "o" && at >= 0) {
      const link = rowLink(all[at]);
      if (link) { remember(); link.click(); return true; }
    }
    return false;
  }

  // --- the decision page ----------------------------------------------------------------
  function press(selector) {
    const button = document.querySelector(selector);
    if (!button || button.disabled) return false;
    button.click();
    return true;
  }

  function decisionKey(key, help) {
    // A request with typed answers (a high-risk tool's approval) names them accept and
    // ignore; a yes/no request, approve and reject.
    const button = (value) => `#decision-form button[name="action"][value="${value}"]`;
    if (key === "a") return press(button("approve")) || press(button("accept"));
    if (key === "r") return press(button("reject")) || press(button("ignore"));
    if (key === "n") {
      const note = document.querySelector('#decision-form [name="note"]');
      if (!note || note.disabled) return false;
      note.focus();
      return true;
    }
    if (key === "N") {
      const next = document.getElementById("next-request");
      if (!next) return false;
      next.click();
      return true;
    }
    if (key === "j" || key === "k") {
      const order = remembered();
      const at = order.indexOf(location.pathname);
      const target = at < 0 ? null : order[at + (key === "j" ? 1 : -1)];
      location.assign(target || help.dataset.queueUrl || "/queue/");
      return true;
    }
    return false;
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.altKey || event.metaKey) return;
    if (typing(event.target)) {
      // Escape leaves the field (what was typed stays), so `r` no longer types an "r".
      if (event.key === "Escape" && document.querySelector("[data-shortcuts]")) event.target.blur();
      return;
    }
    const help = document.querySelector("[data-shortcuts]");
    if (!help) return;
    const key = event.key;
    if (key === "?") {
      help.open = !help.open;
      event.preventDefault();
      return;
    }
    const done = help.dataset.shortcuts === "queue" ? queueKey(key) : decisionKey(key, help);
    if (done) event.preventDefault();
  });

  // A live refresh replaces the queue's rows: keep the selection (and the focus it had).
  document.addEventListener("htmx:afterSettle", function () {
    const row = currentId && document.getElementById(currentId);
    if (!row || row.classList.contains("kbd-current")) return;
    const lost = !document.activeElement || document.activeElement === document.body;
    row.classList.add("kbd-current");
    const link = rowLink(row);
    if (lost && link) link.focus();
  });

  // Opening a request from the queue by mouse or Enter also remembers the queue's order.
  document.addEventListener("click", function (event) {
    if (event.target instanceof Element && event.target.closest("#queue-rows a[href]")) remember();
  });
})();
