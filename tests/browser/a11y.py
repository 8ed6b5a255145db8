"""Checks a page as a phone user and a screen-reader user would meet it: nothing wider
than the screen, and no serious or critical axe-core finding.

axe-core is vendored under tests/browser/vendor (its licence beside it), so the tests
fetch nothing. It is evaluated through Playwright's devtools channel, which the page's
Content-Security-Policy does not govern (an injected <script> would be blocked), so the
pages keep their real policy and the violation watch stays on."""

from __future__ import annotations

from pathlib import Path

AXE_JS = Path(__file__).parent / "vendor" / "axe-core-4.14.1" / "axe.min.js"
_AXE_SOURCE: list[str] = []

PHONE = {"width": 390, "height": 844}
BLOCKING = ("serious", "critical")


def overflow(page) -> list[str]:
    """What makes the page wider than its viewport, or keeps Log out out of view."""
    found = []
    width = page.evaluate("() => window.innerWidth")
    scroll = page.evaluate("() => document.documentElement.scrollWidth")
    if scroll > width:
        widest = page.evaluate(
            """() => [...document.querySelectorAll("body *")]
                 .map((el) => [el.getBoundingClientRect().right, el])
                 .filter(([right]) => right > window.innerWidth + 1)
                 .slice(-3)
                 .map(([right, el]) =>
                   `${el.tagName.toLowerCase()}.${el.className} ${Math.round(right)}px`)"""
        )
        found.append(f"{scroll}px wide in a {width}px viewport ({', '.join(widest)})")
    logout = page.get_by_role("button", name="Log out")
    if logout.count():
        box = logout.bounding_box()
        if box is None or box["x"] < 0 or box["x"] + box["width"] > width:
            found.append(f"Log out is outside the viewport: {box}")
    return found


def axe_violations(page, impacts: tuple[str, ...] = BLOCKING) -> list[str]:
    """axe-core's violations of the given impacts on the page, one line each."""
    if not _AXE_SOURCE:
        _AXE_SOURCE.append(AXE_JS.read_text())
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(_AXE_SOURCE[0])
    violations = page.evaluate(
        """async () => {
             const result = await axe.run(document, { resultTypes: ["violations"] });
             return result.violations.map((v) => ({
               id: v.id, impact: v.impact, help: v.help,
               nodes: v.nodes.slice(0, 3).map((n) =>
                 n.target.join(" ") + " " + (n.failureSummary || "").split("\\n")[1]),
             }));
           }"""
    )
    return [
        f"{v['impact']} {v['id']}: {v['help']} at {'; '.join(v['nodes'])}"
        for v in violations
        if v["impact"] in impacts
    ]
