"""Notifications name an outcome as every page does (docs/glossary.md), not by its code."""

from __future__ import annotations

import pytest

from portal.models import Decision, Notification
from portal.notify.events import REQUEST_DECIDED, summary


@pytest.mark.parametrize(
    ("outcome", "words"),
    [
        ("edited", "approved with edited arguments"),
        ("responded", "answered in words instead"),
        ("rejected", "rejected"),
        ("nonsense", "decided"),
    ],
)
def test_a_decided_requests_title_says_the_outcome_in_words(outcome, words):
    note = Notification(
        kind=REQUEST_DECIDED,
        agent="refunds",
        payload={"decision": {"outcome": outcome, "reviewer": "rita"}, "request": {}},
    )

    assert summary(note) == f"Request from refunds {words} by rita"
    assert Decision.Outcome.EDITED.label == "Approved with edited arguments"
