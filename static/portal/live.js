// Live pages: the review queue and thread streams over websockets.
//
// The server stays the source of truth. Sockets only bring news: a queue row rendered by
// the server (inserted, replaced or removed here), or a thread's streamed chunks (token
// deltas appended as they come). Whenever the picture may be incomplete (the first
// connect, a reconnect after a drop, a run that paused or finished), the region is
// fetched again over HTTP, and the server rebuilds it from the database and checkpoints.
(function () {
  "use strict";

  const CLOSE_SIGNED_OUT = 4401;
  const CLOSE_FORBIDDEN = 4403;
  const LABELS = {
    connecting: "Connecting…",
    open: "Live",
    reconnecting: "Reconnecting…",
    "signed-out": "Signed out: reload the page to sign in again",
    forbidden: "Live updates are not available to you here",
  };

  function wsUrl(path) {
    return (location.protocol === "https:" ? "wss://" : "ws://") + location.host + path;
  }

  function showState(state) {
    document.querySelectorAll("[data-live-status]").forEach(function (el) {
      el.dataset.state = state;
      const dot = el.querySelector(".live-dot");
      if (dot) dot.classList.toggle("on", state === "open");
      const label = el.querySelector("[data-live-label]");
      if (label) label.textContent = LABELS[state] || state;
    });
  }

  // One socket that reconnects with exponential backoff (0.5 s doubling to 15 s, with
  // jitter so a restarted server is not hit by every client at once). onOpen(true) means
  // "this is a reconnect": something may have been missed.
  function liveSocket(path, onMessage, onOpen) {
    let attempt = 0;
    let opens = 0;
    let stopped = false;
    let ws = null;
    let holdUntil = 0;
    function connect() {
      const wait = holdUntil - Date.now();
      if (wait > 0) { setTimeout(connect, wait); return; }
      showState(opens ? "reconnecting" : "connecting");
      ws = new WebSocket(wsUrl(path));
      ws.onopen = function () {
        attempt = 0;
        showState("open");
        onOpen(opens++ > 0);
      };
      ws.onmessage = function (event) {
        let data;
        try { data = JSON.parse(event.data); } catch (e) { return; }
        onMessage(data);
      };
      ws.onclose = function (event) {
        if (stopped) return;
        if (event.code === CLOSE_SIGNED_OUT) { stopped = true; showState("signed-out"); return; }
        if (event.code === CLOSE_FORBIDDEN) { stopped = true; showState("forbidden"); return; }
        showState("reconnecting");
        const delay = Math.min(15000, 500 * Math.pow(2, attempt++)) * (0.8 + Math.random() * 0.4);
        setTimeout(connect, delay);
      };
    }
    window.addEventListener("pagehide", function () { stopped = true; if (ws) ws.close(); });
    connect();
    return {
      isOpen: function () { return ws !== null && ws.readyState === WebSocket.OPEN; },
      // For tests and the demo: drop the connection as a network failure would, and
      // stay away for holdMs before the usual reconnect.
      drop: function (holdMs) { holdUntil = Date.now() + (holdMs || 0); if (ws) ws.close(4000); },
    };
  }
  // sockets: for tests and the console; deltas: how many streamed tokens arrived.
  // Counters for tests and for debugging in the console: stream deltas drawn, and
  // transcript refreshes scheduled or in flight.
  window.portalLive = { sockets: [], deltas: 0, refreshes: 0 };

  function parseRow(html) {
    const tpl = document.createElement("template");
    tpl.innerHTML = html.trim();
    return tpl.content.querySelector("tr");
  }

  function activate(el) {
    if (window.htmx) window.htmx.process(el);
    if (window.portalRefreshTimes) window.portalRefreshTimes(el);
  }

  // --- the review queue ------------------------------------------------------------
  function queueTable() { return document.getElementById("queue-table"); }

  function hideForeignButtons(root) {
    const table = queueTable();
    const me = table ? table.dataset.me : "";
    (root || document).querySelectorAll("[data-only-for]").forEach(function (button) {
      button.hidden = button.dataset.onlyFor !== me;
    });
  }

  function queueCounts(delta) {
    const table = queueTable();
    if (!table) return;
    const count = table.querySelector("[data-queue-count]");
    if (count && delta) count.textContent = Math.max(0, parseInt(count.textContent, 10) + delta);
    const empty = document.getElementById("queue-empty");
    if (empty) empty.hidden = table.querySelectorAll("tr.queue-row").length > 0;
  }

  function initQueue(root) {
    const loadedAt = Date.now();
    function refresh() {
      const table = queueTable();
      if (table && window.htmx) {
        window.htmx.ajax("GET", table.dataset.refreshUrl, { target: "#queue-table", swap: "outerHTML" });
      }
    }
    function onMessage(msg) {
      if (msg.type !== "queue") return;
      const table = queueTable();
      if (!table) return;
      const existing = document.getElementById("q-" + msg.interrupt_id);
      if (msg.status !== "pending") {
        if (existing) { existing.remove(); queueCounts(-1); }
        return;
      }
      if (!msg.html) { refresh(); return; }
      const row = parseRow(msg.html);
      if (!row) return;
      if (existing) {
        existing.replaceWith(row);
      } else {
        if (table.dataset.agent && table.dataset.agent !== msg.agent) return;
        if (table.dataset.reason && table.dataset.reason !== msg.reason) return;
        const rows = document.getElementById("queue-rows");
        // Newest rows belong at the end of the last page (oldest first) or the top of
        // the first page (newest first); other pages learn of them when they page on.
        if (table.dataset.sort === "newest") {
          if (table.dataset.firstPage !== "1") return;
          rows.prepend(row);
        } else {
          if (table.dataset.lastPage !== "1") return;
          rows.append(row);
        }
        row.classList.add("new");
        queueCounts(+1);
      }
      activate(row);
      hideForeignButtons(row);
    }
    const socket = liveSocket(root.dataset.liveQueue, onMessage, function (reconnect) {
      // Catch up on anything published while we were away (or before the first connect).
      if (reconnect || Date.now() - loadedAt > 1000) refresh();
    });
    window.portalLive.sockets.push(socket);
    // Publishing is best effort: a server process reconnecting to Redis misses what is
    // sent meanwhile, with no sign on this socket. So re-fetch now and then, and when the
    // tab comes back into view; never while the keyboard focus is in the table (the swap
    // would lose it), and not while hidden.
    function resync() {
      const table = queueTable();
      if (document.hidden || (table && table.contains(document.activeElement))) return;
      refresh();
    }
    let resyncTimer = null;
    window.portalLive.resyncEvery = function (ms) {
      if (resyncTimer) clearInterval(resyncTimer);
      resyncTimer = ms > 0 ? setInterval(resync, ms) : null;
    };
    window.portalLive.resyncEvery(parseInt(root.dataset.resyncMs || "60000", 10));
    document.addEventListener("visibilitychange", resync);
    hideForeignButtons(document);
    document.addEventListener("htmx:afterSettle", function () { hideForeignButtons(document); });
    // A claim without a live socket still shows: fetch the queue once the click is done.
    document.addEventListener("htmx:afterRequest", function (event) {
      const source = event.detail && event.detail.elt;
      if (source && source.hasAttribute && source.hasAttribute("data-queue-action") && !socket.isOpen()) refresh();
    });
  }

  // --- thread streams (chat, thread page, the interrupt page's live output) -------------
  function initThread(root) {
    const targetId = root.dataset.refreshTarget || "transcript";
    let pending = null;
    function refresh() {
      // Coalesce bursts (a status change and the final chunk arrive together).
      if (pending) return;
      window.portalLive.refreshes++;
      const done = function () { window.portalLive.refreshes--; };
      pending = setTimeout(function () {
        pending = null;
        if (window.htmx && document.getElementById(targetId)) {
          window.htmx
            .ajax("GET", root.dataset.refreshUrl, { target: "#" + targetId, swap: "outerHTML" })
            .then(done, done);
        } else {
          done();
        }
      }, 60);
    }
    function messageList() {
      const region = document.getElementById(targetId);
      return region ? region.querySelector("[data-stream-into]") : null;
    }
    function bubble(message) {
      const id = "msg-" + message.id;
      let el = document.getElementById(id);
      if (el) return el;
      const list = messageList();
      if (!list) return null;
      el = document.createElement("div");
      el.id = id;
      el.className = "msg " + (message.role || "assistant") + " streaming";
      const who = document.createElement("span");
      who.className = "who";
      who.textContent = message.role === "tool" ? "tool result" : (message.role || "assistant");
      const body = document.createElement("span");
      body.className = "body";
      el.append(who, body);
      const typing = list.querySelector("[data-typing]");
      if (typing) list.insertBefore(el, typing); else list.append(el);
      return el;
    }
    function setWorking(on) {
      const region = document.getElementById(targetId);
      if (region) region.dataset.working = on ? "1" : "0";
    }
    function onMessage(msg) {
      if (msg.type === "status") { refresh(); return; }
      if (msg.type !== "chunk" || !msg.chunk) return;
      const chunk = msg.chunk;
      const data = chunk.data || {};
      if (chunk.event === "message" && chunk.message) {
        setWorking(true);
        // A tool's result is data (often JSON): the server words it, and the transcript
        // re-fetched when the run pauses or ends shows it so.
        if (chunk.message.role === "tool") return;
        const el = bubble(chunk.message);
        if (!el) return;
        const body = el.querySelector(".body") || el;
        if (data.delta) {
          window.portalLive.deltas++;
          body.textContent += data.delta;
        } else if (data.complete) {
          if (chunk.message.content) body.textContent = chunk.message.content;
          el.classList.remove("streaming");
          if (!chunk.message.content && !el.dataset.server) el.remove();
        }
        el.scrollIntoView({ block: "nearest" });
      } else if (chunk.event === "updates" && (data.status === "interrupted" || data.status === "done")) {
        refresh();
      } else if (chunk.event === "updates") {
        setWorking(true);
      } else if (chunk.event === "error") {
        refresh();
      }
    }
    const socket = liveSocket(root.dataset.liveThread, onMessage, function () {
      // Always rebuild from the checkpoint on connect: a run may have streamed before
      // this page's socket was open, or while it was dropped.
      refresh();
    });
    window.portalLive.sockets.push(socket);
  }

  // --- the chat composer: usable only while the thread can take a new turn --------------
  const STATUS_LABELS = { interrupted: "waiting for approval" };
  const STATUS_CLASSES = { interrupted: "warn", done: "ok", failed: "bad" };
  function syncComposer() {
    const form = document.getElementById("chat-composer");
    const region = document.getElementById("transcript");
    if (!form || !region) return;
    // Keep this conversation's entry in the side list in step with the transcript.
    const tag = document.querySelector(".chat-recent li[aria-current] .tag");
    const status = region.dataset.status;
    if (tag && status) {
      tag.textContent = STATUS_LABELS[status] || status;
      tag.className = "tag status-" + status + (STATUS_CLASSES[status] ? " " + STATUS_CLASSES[status] : "");
    }
    const open = region.dataset.canReply === "1";
    form.querySelectorAll("textarea, button").forEach(function (el) { el.disabled = !open; });
    const why = form.querySelector("[data-composer-why]");
    if (why) why.hidden = open;
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-live-queue]").forEach(initQueue);
    document.querySelectorAll("[data-live-thread]").forEach(initThread);
    syncComposer();
  });
  document.addEventListener("htmx:afterSettle", syncComposer);
})();
