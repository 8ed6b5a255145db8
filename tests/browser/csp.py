"""Watching browser pages for Content-Security-Policy violations.

A module of its own (not the conftest, which pytest imports under another name), so the
fixtures and the tests share one registry.
"""

from __future__ import annotations

# Every page reports Content-Security-Policy violations to the test: the DOM event (with
# the directive and what was blocked) and Chromium's console line, both kept per context.
_CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.__portalCspViolation(
    `${e.violatedDirective} blocked ${e.blockedURI || "inline"} on ${e.documentURI}` +
    (e.sample ? ` (${e.sample})` : "") + ` at ${e.sourceFile}:${e.lineNumber}`
  );
});
"""
VIOLATIONS: dict[int, list[str]] = {}


def watch_csp(context) -> list[str]:
    """Record every CSP violation in ``context``'s pages; returns the (live) list."""
    found: list[str] = []
    VIOLATIONS[id(context._impl_obj)] = found
    context.expose_function("__portalCspViolation", lambda text: found.append(text))
    context.add_init_script(_CSP_LISTENER)

    def on_console(message) -> None:
        if "Content Security Policy" in message.text:
            found.append(f"console: {message.text}")

    context.on("console", on_console)
    return found


def csp_violations(page) -> list[str]:
    return VIOLATIONS[id(page.context._impl_obj)]
