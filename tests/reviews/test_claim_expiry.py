"""Claims lapse after PORTAL_CLAIM_EXPIRES_SECONDS: a lapsed claim blocks nobody and
anyone who may claim takes it, audited as taken from its holder; a live one still blocks
all but those with take_over_claim. "Next request" skips what this reviewer may not decide."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from portal.errors import ClaimConflict, DecisionForbidden
from portal.models import AuditEvent, Interrupt
from portal.reviews.checks import decision_forbidden
from portal.reviews.claims import interrupt_claim, interrupt_unclaim
from tests.factories import make_interrupt

pytestmark = pytest.mark.django_db


def claimed(interrupt: Interrupt, user, minutes_ago: float) -> Interrupt:
    interrupt_claim(interrupt=interrupt, user=user)
    at = timezone.now() - timedelta(minutes=minutes_ago)
    Interrupt.objects.filter(pk=interrupt.pk).update(claimed_at=at)
    return Interrupt.objects.select_related("thread", "claimed_by").get(pk=interrupt.pk)


def test_a_claim_blocks_others_until_it_lapses_after_fifteen_minutes(reviewer, second_reviewer):
    fresh = claimed(make_interrupt(), reviewer, minutes_ago=14)
    lapsed = claimed(make_interrupt(), reviewer, minutes_ago=16)

    assert fresh.claim_holder() == reviewer
    assert isinstance(decision_forbidden(interrupt=fresh, user=second_reviewer), DecisionForbidden)
    assert "the claim lapses at" in str(decision_forbidden(interrupt=fresh, user=second_reviewer))
    assert lapsed.claim_holder() is None
    assert decision_forbidden(interrupt=lapsed, user=second_reviewer) is None


def test_the_time_a_claim_lasts_is_a_setting(settings, reviewer, second_reviewer):
    settings.PORTAL_CLAIM_EXPIRES_SECONDS = 60
    request = claimed(make_interrupt(), reviewer, minutes_ago=2)

    assert decision_forbidden(interrupt=request, user=second_reviewer) is None


def test_a_lapsed_claim_is_taken_by_another_reviewer_and_the_takeover_is_audited(
    reviewer, second_reviewer
):
    request = claimed(make_interrupt(), reviewer, minutes_ago=20)

    interrupt_claim(interrupt=request, user=second_reviewer)

    request.refresh_from_db()
    assert request.claimed_by == second_reviewer
    event = AuditEvent.objects.filter(action="interrupt.claim").order_by("-id").first()
    assert event.actor_name == "rob-reviewer"
    assert event.detail == {"taken_over_from": "rita-reviewer", "lapsed": True}


def test_a_live_claim_is_refused_to_others_but_taken_over_with_the_permission(
    reviewer, second_reviewer
):
    request = claimed(make_interrupt(), reviewer, minutes_ago=1)
    with pytest.raises(ClaimConflict, match="the claim lapses at"):
        interrupt_claim(interrupt=request, user=second_reviewer)

    second_reviewer.user_permissions.add(Permission.objects.get(codename="take_over_claim"))
    second_reviewer = type(second_reviewer).objects.get(pk=second_reviewer.pk)
    interrupt_claim(interrupt=request, user=second_reviewer)

    event = AuditEvent.objects.filter(action="interrupt.claim").order_by("-id").first()
    assert event.detail == {"taken_over_from": "rita-reviewer", "lapsed": False}


def test_anyone_who_may_claim_can_release_a_lapsed_claim(reviewer, second_reviewer):
    live = claimed(make_interrupt(), reviewer, minutes_ago=1)
    lapsed = claimed(make_interrupt(), reviewer, minutes_ago=30)

    with pytest.raises(DecisionForbidden):
        interrupt_unclaim(interrupt=live, user=second_reviewer)
    interrupt_unclaim(interrupt=lapsed, user=second_reviewer)

    lapsed.refresh_from_db()
    assert lapsed.claimed_by is None


def test_the_request_page_says_how_long_a_claim_lasts_and_when_it_lapsed(
    client, reviewer, second_reviewer
):
    fresh = claimed(make_interrupt(), reviewer, minutes_ago=1)
    lapsed = claimed(make_interrupt(), reviewer, minutes_ago=30)
    client.force_login(second_reviewer)

    page = client.get(reverse("interrupt_detail", args=[fresh.pk])).content.decode()
    gone = client.get(reverse("interrupt_detail", args=[lapsed.pk])).content.decode()

    assert 'id="claim-lapses"' in page and "claims last 15 minutes" in page
    assert 'id="claim-lapsed"' in gone and "Anyone may claim this request" in gone
    assert '<fieldset class="bare">' in gone  # the form is open: the claim blocks nobody


def test_a_claim_that_lapsed_since_the_last_sweep_is_announced_to_open_queues_once(
    monkeypatch, reviewer
):
    # A lapse is the clock's doing, not a write: the sweep is what tells open queues.
    from portal.notify import broadcast
    from portal.reviews.claims import claims_lapsed_announce

    announced: list[str] = []
    monkeypatch.setattr(
        broadcast, "publish_queue_change", lambda **c: announced.append(c["interrupt_id"])
    )
    just_lapsed = claimed(make_interrupt(), reviewer, minutes_ago=15.05)  # 3 s ago
    long_lapsed = claimed(make_interrupt(), reviewer, minutes_ago=40)
    still_held = claimed(make_interrupt(), reviewer, minutes_ago=14)
    now = timezone.now()

    assert claims_lapsed_announce(since=now - timedelta(seconds=10), now=now) == 1
    assert announced == [just_lapsed.pk]
    assert long_lapsed.pk not in announced and still_held.pk not in announced
    # The next sweep's window starts where this one ended: nothing is said twice.
    assert claims_lapsed_announce(since=now, now=now + timedelta(seconds=5)) == 0


def test_a_lead_reviewer_takes_over_a_live_claim_by_default_and_it_is_audited(
    roles, django_user_model, reviewer
):
    # setup_roles's "lead reviewer" role holds take_over_claim; a plain reviewer does not.
    lead = django_user_model.objects.create_user(username="lena-lead", password="pw")
    lead.groups.add(roles["lead reviewer"])
    request = claimed(make_interrupt(), reviewer, minutes_ago=1)

    interrupt_claim(interrupt=request, user=lead)

    request.refresh_from_db()
    assert request.claimed_by == lead
    event = AuditEvent.objects.filter(action="interrupt.claim").order_by("-id").first()
    assert (event.actor_name, event.detail) == (
        "lena-lead",
        {"taken_over_from": "rita-reviewer", "lapsed": False},
    )
    assert "take_over_claim" not in {p.codename for p in roles["reviewer"].permissions.all()}
