"""A decision rule's answer resumes the run exactly once, across real processes: the
worker that applied the rule is killed (SIGKILL) inside the resumed run, and another
worker finishes it; the rule acts once and the payment is made once."""

from __future__ import annotations

import pytest

from portal.models import Decision, Interrupt, RuleHit, Run, Thread
from portal.reviews import threads
from tests.processes import output, wait_for
from tests.reviews.rulebook import active_rule
from tests.testagents import read_effects

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("test_agents")]

LEASE = {"PORTAL_RUN_LEASE_SECONDS": "1"}


def test_a_worker_killed_after_a_rule_decided_leaves_one_resume_that_another_finishes(
    spawn, support_agent, effects
):
    version = active_rule("small payments", agent="ruled")
    thread, _ = threads.thread_start(
        agent="ruled",
        input={"messages": [{"role": "user", "content": "pay 5"}]},
        user=support_agent,
    )
    (effects / "hold_approved").touch()

    # The worker runs the thread to its request, applies the rule (which decides and
    # queues the resume), takes the resume, and is killed inside the approved call.
    doomed = spawn("run_worker", "--id", "doomed", "--poll", "0.1", **LEASE)
    wait_for(lambda: read_effects(effects, "reached_approved"), timeout=30, what="the approval")
    doomed.kill()
    doomed.wait(timeout=10)
    decision = Decision.objects.get(thread=thread)
    assert (decision.rule_version, decision.reviewer) == (version, None), output(doomed)
    resume = Run.objects.get(thread=thread, kind=Run.Kind.RESUME)
    assert resume.status == Run.Status.RUNNING  # nobody recorded its outcome
    assert read_effects(effects, "ledger") == []
    (effects / "hold_approved").unlink()

    rescuer = spawn("run_worker", "--id", "rescuer", "--poll", "0.1", **LEASE)
    wait_for(
        lambda: Thread.objects.get(pk=thread.pk).status == Thread.Status.DONE,
        timeout=30,
        what="the rescue",
    )
    rescuer.terminate()
    rescuer.wait(timeout=10)

    resume.refresh_from_db()
    assert (resume.status, resume.attempts) == (Run.Status.SUCCEEDED, 2), output(rescuer)
    assert resume.lease_owner.split("/")[0] == "rescuer"
    assert Run.objects.filter(thread=thread, kind=Run.Kind.RESUME).count() == 1
    assert Decision.objects.filter(thread=thread).count() == 1
    assert RuleHit.objects.filter(rule=version.rule).count() == 1
    assert not Interrupt.objects.filter(thread=thread, status=Interrupt.Status.PENDING).exists()
    assert len(read_effects(effects, "reached_approved")) == 2  # the call ran again
    assert [line.split(" ", 1)[1] for line in read_effects(effects, "ledger")] == [
        f"{thread.pk} 5.0"
    ]
