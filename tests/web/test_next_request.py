"""After a decision, "Next request" opens the oldest pending request this reviewer may
decide (someone else's live claim and their own threads are skipped)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.models import Interrupt
from portal.reviews.claims import interrupt_claim
from tests.factories import make_decision, make_interrupt

pytestmark = pytest.mark.django_db


def claimed(interrupt: Interrupt, user, minutes_ago: float) -> Interrupt:
    interrupt_claim(interrupt=interrupt, user=user)
    at = timezone.now() - timedelta(minutes=minutes_ago)
    Interrupt.objects.filter(pk=interrupt.pk).update(claimed_at=at)
    return interrupt


def test_next_request_opens_the_oldest_one_this_reviewer_may_decide(
    client, reviewer, second_reviewer
):
    claimed(make_interrupt(), second_reviewer, minutes_ago=1)  # someone else's, live
    make_interrupt(owner=reviewer)  # theirs: separation of duties
    oldest_open = make_interrupt()
    make_interrupt()
    client.force_login(reviewer)

    response = client.get(reverse("queue_next"))

    assert response.status_code == 302
    assert response["Location"] == reverse("interrupt_detail", args=[oldest_open.pk])


def test_next_request_skips_the_one_just_opened_and_says_when_none_is_left(client, reviewer):
    only = make_interrupt()
    client.force_login(reviewer)

    response = client.get(reverse("queue_next") + f"?after={only.pk}", follow=True)

    assert response.redirect_chain[-1][0] == reverse("queue")
    assert "Nothing else is waiting for you" in response.content.decode()


def test_a_decided_request_offers_next_request_and_says_what_was_waiting(client, reviewer):
    request = make_interrupt()
    make_decision(interrupt=request, reviewer=reviewer)
    client.force_login(reviewer)

    page = client.get(reverse("interrupt_detail", args=[request.pk])).content.decode()

    assert 'id="next-request"' in page and f"?after={request.pk}" in page
