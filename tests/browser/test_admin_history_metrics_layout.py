"""Layout of the admin, the history and the metrics in real Chromium: nothing pushed out
of view at the widths people use (1,280 px on a desk, 390 px on a phone)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from portal.reviews.decisions import decision_submit
from tests.browser.conftest import settle
from tests.factories import admin_change_url, make_interrupt, make_tool_approval

# The widest element's right edge beyond the viewport, and what it is (for the message).
_OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  let worst = null;
  for (const el of document.querySelectorAll("body *")) {
    const right = el.getBoundingClientRect().right;
    if (right > width + 1 && (!worst || right > worst.right)) {
      worst = {right, what: el.tagName + (el.id ? "#" + el.id : "") + "." + el.className};
    }
  }
  return {page: document.documentElement.scrollWidth - width, worst};
}"""


def _overflow(page) -> dict:
    return page.evaluate(_OVERFLOW)


@pytest.fixture
def data(live, support_agent, reviewer):
    long_note = "The customer wrote three times about this order; " * 30
    pending = make_interrupt(owner=support_agent)
    approval = make_tool_approval(owner=support_agent)
    decided = make_interrupt(owner=support_agent)
    decision = decision_submit(
        interrupt=decided,
        reviewer=reviewer,
        value={"approved": True, "note": long_note + "x" * 300},
        resume_interrupt_id=decided.pk,
    )
    return {"pending": pending, "approval": approval, "decision": decision}


def test_every_admin_list_fits_1280_pixels(live, login, data, admin_user):
    page = login(admin_user, start="/admin/")
    for name in ("thread", "interrupt", "decision", "run", "checkpoint", "apitoken"):
        page.goto(f"{live}/admin/portal/{name}/")
        settle(page)
        found = _overflow(page)
        assert found["page"] <= 0 and found["worst"] is None, (name, found)


# Computed look of an element, to compare with the admin's own.
_LOOK = """(el) => { const s = getComputedStyle(el);
  return {background: s.backgroundColor, color: s.color, padding: s.padding,
          radius: s.borderRadius, border: s.borderTopWidth, font: s.fontSize}; }"""


def test_the_admin_decide_form_looks_like_the_admins_own_buttons(live, login, data, admin_user):
    page = login(admin_user, start=admin_change_url(data["approval"]))
    # The admin's own default and delete buttons and a submit row, for comparison.
    page.evaluate(
        """() => { const row = document.createElement("div"); row.className = "submit-row";
        row.id = "reference-row";
        row.innerHTML = '<input type="submit" class="default" value="Save" id="ref-default">' +
          '<input type="submit" value="Other" id="ref-plain">';
        document.querySelector("#content").append(row); }"""
    )
    form = page.locator("#admin-decision")
    # A tool approval's typed answers: accept is the default; ignore is a plain button,
    # not the delete red (only a refusal is red).
    approve = form.get_by_role("button", name="Accept", exact=True).evaluate(_LOOK)
    default = page.locator("#ref-default").evaluate(_LOOK)
    assert approve == default
    ignore = form.get_by_role("button", name="Ignore", exact=True).evaluate(_LOOK)
    assert ignore == page.locator("#ref-plain").evaluate(_LOOK)
    actions = form.locator(".actions").last.evaluate(_LOOK)
    assert actions == page.locator("#reference-row").evaluate(_LOOK)
    # One heading, the module's: the portal's own "Your decision" is not repeated.
    assert form.get_by_role("heading").all_inner_texts() == ["Decision"]


def test_a_long_note_wraps_inside_the_history_table(live, login, data, auditor):
    page = login(auditor, start="/history/")
    found = _overflow(page)
    assert found["page"] <= 0 and found["worst"] is None, found
    card = page.locator("#history-results").evaluate("(el) => el.scrollWidth - el.clientWidth")
    assert card <= 0
    assert "x" * 300 in page.locator(f"#decision-{data['decision'].pk}").inner_text()


def test_the_metrics_charts_are_readable_on_a_phone(live, login, data, auditor):
    page = login(auditor, start="/metrics/")
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_timeout(100)
    # (The page's navigation is the layout's own business; each chart keeps to its card.)
    for chart in ("#chart-queue-depth", "#chart-time-to-decision"):
        spill = page.locator(chart).evaluate("(el) => el.scrollWidth - el.clientWidth")
        assert spill <= 0, chart
        sizes = page.locator(f"{chart} svg text.tick").evaluate_all(
            "(all) => all.map(t => t.getBoundingClientRect().height)"
        )
        assert sizes and min(sizes) >= 9, (chart, sizes)
    # The bar labels do not run into each other.
    boxes = page.locator("#chart-time-to-decision svg text.tick[text-anchor=middle]").evaluate_all(
        "(all) => all.map(t => { const r = t.getBoundingClientRect(); return [r.left, r.right]; })"
    )
    assert len(boxes) == 8
    for (_, right), (left, _) in pairwise(boxes):
        assert right <= left, boxes
