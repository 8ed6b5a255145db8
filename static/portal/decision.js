// The decision form (dashboard and admin): typed work is never thrown away silently. A
// reviewer who wrote a response, or changed an argument, and then presses an answer that
// does not use it (Accept, Approve, Reject, Ignore; by mouse or by the keyboard's a / r,
// which press the same buttons) is asked first. Saying yes clears what was typed, so the
// server (which refuses such a POST, naming the field) records the answer they chose.
(function () {
  "use strict";

  // Which typed parts each answer uses; any other typed part would be lost.
  const USES = { response: ["response"], edit: ["args"] };

  function typed(form) {
    const parts = [];
    const response = form.querySelector('[name="response"]');
    if (response && response.value.trim()) parts.push({ part: "response", what: "a response", fields: [response] });
    const edited = Array.from(form.querySelectorAll(".edit-args input, .edit-args textarea, .edit-args select"))
      .filter(function (f) {
        if (f.type === "checkbox" || f.type === "radio") return f.checked !== f.defaultChecked;
        if (f.tagName === "SELECT") return Array.from(f.options).some(function (o) { return o.selected !== o.defaultSelected; });
        return f.value !== f.defaultValue;
      });
    if (edited.length) parts.push({ part: "args", what: "changed arguments", fields: edited });
    return parts;
  }

  function putBack(field) {
    if (field.type === "checkbox" || field.type === "radio") field.checked = field.defaultChecked;
    else if (field.tagName === "SELECT") Array.from(field.options).forEach(function (o) { o.selected = o.defaultSelected; });
    else field.value = field.defaultValue;
  }

  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.closest("#decision-form")) return;
    const button = event.submitter;
    if (!button || button.name !== "action") return;
    const uses = USES[button.value] || [];
    const lost = typed(form).filter(function (t) { return uses.indexOf(t.part) < 0; });
    if (!lost.length) return;
    const what = lost.map(function (t) { return t.what; }).join(" and ");
    const label = button.textContent.trim();
    if (!window.confirm("You wrote " + what + ". \u201c" + label + "\u201d does not send it, so it would be discarded. Discard it and " + label.toLowerCase() + "?")) {
      event.preventDefault();
      const first = lost[0].fields[0];
      const fold = first.closest("details");
      if (fold) fold.open = true;
      first.focus();
      return;
    }
    lost.forEach(function (t) {
      t.fields.forEach(function (f) {
        if (t.part === "response") f.value = "";
        else putBack(f);
      });
    });
  });
})();
