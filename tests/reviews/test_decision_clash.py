"""A decision's insert that clashes (the request has a decision already) is refused as
already decided; any other write of the closing that breaks a constraint is an error of
its own, and nothing of the answer is kept either way."""

from __future__ import annotations

import pytest
from django.db import IntegrityError

from portal.errors import AlreadyDecided
from portal.models import Decision, Interrupt, Run
from portal.models.together import insert
from portal.reviews import resolve as resolving
from portal.reviews.decisions import decision_submit
from tests.factories import make_interrupt, make_user

pytestmark = pytest.mark.django_db(transaction=True)


def _answer(interrupt, reviewer):
    return decision_submit(
        interrupt=interrupt,
        reviewer=reviewer,
        value={"approved": True},
        resume_interrupt_id=interrupt.pk,
    )


def _nothing_kept(interrupt) -> None:
    interrupt.refresh_from_db()
    assert interrupt.status == Interrupt.Status.PENDING
    assert not Run.objects.filter(thread=interrupt.thread, kind=Run.Kind.RESUME).exists()


def test_a_request_with_a_decision_already_is_refused_naming_who_decided(reviewer):
    interrupt = make_interrupt()
    first = make_user("first-reviewer", role="reviewer")
    # A decision that got in without closing the request: the row lock all but rules it
    # out, and the decision's unique request is the database's last word.
    Decision.objects.create(
        interrupt=interrupt, thread=interrupt.thread, reviewer=first, outcome="approved"
    )

    with pytest.raises(AlreadyDecided, match="first-reviewer"):
        _answer(interrupt, reviewer)

    _nothing_kept(interrupt)
    assert Decision.objects.filter(interrupt=interrupt).count() == 1


def test_another_closing_write_that_breaks_a_constraint_is_not_called_already_decided(
    monkeypatch, reviewer
):
    interrupt = make_interrupt()
    queue = resolving.enqueue

    def enqueue_and_a_broken_row(**kwargs):
        run = queue(**kwargs)
        insert(Run(thread=kwargs["thread"], kind=None, input={}))  # kind is NOT NULL
        return run

    monkeypatch.setattr(resolving, "enqueue", enqueue_and_a_broken_row)

    with pytest.raises(IntegrityError):
        _answer(interrupt, reviewer)

    _nothing_kept(interrupt)
    assert not Decision.objects.filter(interrupt=interrupt).exists()
