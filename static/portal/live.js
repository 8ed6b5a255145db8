// Live pages over the htmx websocket extension: the server renders each change once, from the
// partials the pages use, as out-of-band swaps that htmx applies. Here is only what htmx cannot
// do: streamed tokens, catching up, per-viewer form state, and whether the page is live.
(function () {
  "use strict";
  const LABELS = { connecting: "Connecting…", open: "Live", reconnecting: "Reconnecting…",
    "signed-out": "Signed out: reload the page to sign in again", forbidden: "Live updates are not available to you here" };
  const ENDED = { 4401: "signed-out", 4403: "forbidden", 4404: "forbidden" };
  const live = (window.portalLive = { deltas: 0, refreshes: 0 }); // for tests and the console
  const each = function (selector, fn) { document.querySelectorAll(selector).forEach(fn); };
  let holdUntil = 0, opens = 0, resync = null;
  // A row of another page of the queue, or a message for a transcript this page does not
  // show, is not news here: drop the swaps whose target is missing before htmx sees them.
  htmx.defineExtension("portal-live", { transformResponse: function (text, xhr, elt) {
    if (xhr || !elt.hasAttribute("ws-connect")) return text;
    const tpl = document.createElement("template"); tpl.innerHTML = text;
    Array.from(tpl.content.children).forEach(function (el) {
      const spec = el.getAttribute("hx-swap-oob") || "true", at = spec.indexOf(":");
      if (!document.querySelector(at > 0 ? spec.slice(at + 1) : "#" + CSS.escape(el.id))) el.remove();
    });
    return tpl.innerHTML;
  } });
  function show(state) { each("[data-live-status]", function (el) { el.dataset.state = state; el.lastChild.textContent = LABELS[state]; }); }
  // The page's own view of its live region, from the server (it depends on who looks). A burst
  // makes one fetch; news while one is out outdates its answer: it is not shown, and fetched again.
  function refresh(root) {
    if (!root.dataset.refreshUrl || root.refreshing || root.out) return void (root.stale = !!root.out);
    live.refreshes++;
    root.refreshing = setTimeout(function () {
      const target = document.getElementById(root.dataset.refreshTarget);
      const done = function () { live.refreshes--; root.out = false; if (root.stale) refresh(root); };
      root.refreshing = null; root.out = true; root.stale = false;
      (target ? htmx.ajax("GET", root.dataset.refreshUrl, { target: target, swap: "outerHTML" }) : Promise.resolve()).then(done, done);
    }, 60);
  }
  document.addEventListener("htmx:beforeSwap", function (e) { // an outdated answer (above)
    const root = e.detail.target.closest("[data-refresh-target]");
    if (root && root.stale && root.out && e.detail.target.id === root.dataset.refreshTarget) e.detail.shouldSwap = false;
  });
  function draw(root, message, delta) { // the finished message's partial replaces the bubble
    const list = document.querySelector("#" + root.dataset.refreshTarget + " [data-stream-into]");
    let bubble = document.getElementById("msg-" + message.id);
    if (!list) return;
    if (!bubble) {
      bubble = list.appendChild(document.createElement("div"));
      bubble.id = "msg-" + message.id; bubble.className = "msg " + (message.role || "assistant") + " streaming";
      bubble.innerHTML = '<span class="who"></span><span class="body"></span>';
      bubble.firstChild.textContent = message.role || "assistant";
    }
    live.deltas++;
    bubble.querySelector(".body").textContent += delta;
    bubble.scrollIntoView({ block: "nearest" });
  }
  // Streamed tokens and run events come as JSON; everything else is HTML for htmx.
  document.addEventListener("htmx:wsBeforeMessage", function (e) {
    if (e.detail.message[0] !== "{") return void (e.target.stale = true); // a swap: news
    e.preventDefault();
    const msg = JSON.parse(e.detail.message), chunk = msg.chunk || {}, data = chunk.data || {};
    if (chunk.event === "message" && chunk.message && data.delta) draw(e.target, chunk.message, data.delta);
    else if (msg.type === "status" || chunk.event === "error" || ["interrupted", "done"].includes(data.status)) refresh(e.target);
  });
  document.addEventListener("htmx:wsConnecting", function () { show(opens ? "reconnecting" : "connecting"); });
  document.addEventListener("htmx:wsOpen", function (e) { opens++; show("open"); refresh(e.target); }); // catch up
  document.addEventListener("htmx:wsClose", function (e) {
    const code = e.detail.event.code, wait = Math.max(holdUntil - Date.now(), 500 + Math.random() * 1000);
    if (ENDED[code]) return show(ENDED[code]);
    show("reconnecting"); // htmx retries an abnormal close itself; an orderly one is retried here
    if (![1006, 1011, 1012, 1013].includes(code)) setTimeout(e.detail.socketWrapper.reconnect, wait);
  });
  live.drop = function (ms) { // as a network failure would, staying away for ms
    holdUntil = Date.now() + (ms || 0); each("[ws-connect]", function (el) { el["htmx-internal-data"].webSocket.socket.close(4000); });
  };
  // Publishing is best effort (a server reconnecting to its channel layer misses what is sent
  // meanwhile): the queue re-fetches now and then, unless hidden or in use.
  live.resyncEvery = function (ms) {
    clearInterval(resync); resync = ms > 0 && setInterval(function () {
      each("[data-resync-ms]", function (root) { if (!document.hidden && !root.contains(document.activeElement)) refresh(root); });
    }, ms);
  };
  // What one shared fragment cannot say per viewer or outside its region: Release for the claim's
  // holder only, a form open while its region allows, a copied status, the title's pending count.
  function sync() {
    const me = document.querySelector("[data-me]"), count = document.getElementById("pending-count");
    each("[data-only-for]", function (b) { b.hidden = !me || b.dataset.onlyFor !== me.dataset.me; });
    each("[data-copy-of]", function (el) { const from = document.getElementById(el.dataset.copyOf); if (from) el.innerHTML = from.innerHTML; });
    each("form[data-open-while]", function (form) {
      const flag = document.getElementById(form.dataset.openWhile), open = !flag || flag.dataset.open === "1", why = form.querySelector("[data-closed-why]");
      form.querySelectorAll("fieldset, input, textarea, select, button").forEach(function (el) { el.disabled = !open; });
      if (why) { if (flag && "why" in flag.dataset) why.textContent = flag.dataset.why; why.hidden = open || !why.textContent; } // the flag's reason for this viewer
    });
    const title = document.title.replace(/^\(\d+\+?\) /, "");
    if (count) document.title = (count.textContent === "0" ? "" : "(" + count.textContent + ") ") + title;
  }
  document.addEventListener("DOMContentLoaded", function () {
    each("[data-resync-ms]", function (queue) { live.resyncEvery(parseInt(queue.dataset.resyncMs, 10)); }); sync();
  });
  ["htmx:afterSettle", "htmx:wsAfterMessage"].forEach(function (name) { document.addEventListener(name, sync); });
})();
