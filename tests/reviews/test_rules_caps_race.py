"""A rule's caps under real concurrency on PostgreSQL: many matching requests arrive at
the same moment, each handed to the rules from its own thread and database connection."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from portal.audit.chains import verify_chain
from portal.models import AuditEvent, Decision, Interrupt, Notification, RuleHit, Run, chain
from portal.reviews.rule_decisions import CAP_REACHED, rules_apply
from tests.factories import make_interrupt
from tests.reviews.rulebook import active_rule

N, CAP = 20, 5


def _at_once(pks: list[str]) -> list[Any]:
    barrier = threading.Barrier(len(pks))
    results: list[Any] = [None] * len(pks)

    def apply(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[n] = rules_apply(pks[n])
        except Exception as exc:
            results[n] = exc
        finally:
            connection.close()  # each thread had its own connection

    started = [threading.Thread(target=apply, args=(n,)) for n in range(len(pks))]
    for t in started:
        t.start()
    for t in started:
        t.join(timeout=60)
    return results


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_twenty_requests_at_once_against_a_cap_of_five_give_five_rule_decisions(roles):
    version = active_rule("small refunds", agent="refunds", cap_per_hour=CAP)
    requests = [make_interrupt(value={"order_id": f"A-{n}", "amount": 4.99}) for n in range(N)]

    results = _at_once([r.pk for r in requests])

    assert not [r for r in results if isinstance(r, Exception)], results
    hits = [r for r in results if isinstance(r, RuleHit)]
    assert len(hits) == CAP, results
    assert Decision.objects.filter(rule_version=version).count() == CAP
    assert Run.objects.filter(kind=Run.Kind.RESUME).count() == CAP
    pending = Interrupt.objects.filter(status=Interrupt.Status.PENDING)
    assert pending.count() == N - CAP  # these go to people
    assert not pending.filter(rule_hit__isnull=False).exists()
    # The operators are told once, however many requests the cap held back.
    assert AuditEvent.objects.filter(action=CAP_REACHED).count() == 1
    assert Notification.objects.filter(kind="rule.cap_reached").count() == 1
    report = verify_chain(Decision.objects.all(), chain=chain.DECISIONS)
    assert report.ok, report


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_twenty_requests_at_once_against_a_daily_amount_cap_stay_under_it(roles):
    active_rule(
        "small refunds",
        agent="refunds",
        cap_amount_field="/payload/amount",
        cap_amount_per_day="25.00",
    )
    requests = [make_interrupt(value={"order_id": f"A-{n}", "amount": 4.0}) for n in range(N)]

    results = _at_once([r.pk for r in requests])

    assert len([r for r in results if isinstance(r, RuleHit)]) == 6, results  # 6 x $4 = $24
    assert sum(h.amount for h in RuleHit.objects.all()) == 24
