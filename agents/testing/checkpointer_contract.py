"""The behaviour every checkpointer must have, as a reusable test class.

Subclass ``CheckpointerContract`` in a test module and provide a ``checkpointer`` fixture
(a fresh, empty store per test); pytest collects the inherited tests::

    class TestMyStore(CheckpointerContract):
        @pytest.fixture
        async def checkpointer(self):
            store = MyStore()
            yield store
            await store.aclose()

The tests are async and expect pytest-asyncio in auto mode.
"""

from __future__ import annotations

from typing import Any

import pytest

from agents.checkpoint import CheckpointConflict, Checkpointer, CheckpointWrite, ThreadStatus
from agents.models.scripted import CallTool, Reply, ScriptedModel, trailing_tool_results
from agents.prebuilt import ReactAgent
from agents.state import ResponseGranularity
from agents.tools import idempotency_key, tool


def _msg(n: int, role: str = "user") -> dict[str, Any]:
    return {"id": f"msg_{n}", "role": role, "content": f"message {n}"}


def _write(
    *messages: dict[str, Any],
    status: ThreadStatus = ThreadStatus.RUNNING,
    next_node: str | None = "MAIN",
    meta: dict[str, Any] | None = None,
    interrupt: dict[str, Any] | None = None,
    node: str | None = None,
) -> CheckpointWrite:
    return CheckpointWrite(
        status=status,
        next_node=next_node,
        new_messages=list(messages),
        meta=meta if meta is not None else {"answers": {}},
        interrupt=interrupt,
        node=node,
    )


_INTERRUPT = {
    "id": "int_1",
    "key": "TOOL:call_1:0",
    "node": "TOOL",
    "value": {"amount": 42.5},
    "message": "Approve?",
    "reason": "tool_approval",
    "response_schema": {"type": "object"},
    "tool_call_id": "call_1",
}


class CheckpointerContract:
    """Inherit and provide a ``checkpointer`` fixture."""

    async def test_an_unknown_thread_loads_as_none(self, checkpointer: Checkpointer) -> None:
        assert await checkpointer.aget("nobody") is None
        assert await checkpointer.alist("nobody") == []

    async def test_a_checkpoint_round_trips_its_fields(self, checkpointer: Checkpointer) -> None:
        meta = {"execution_meta": {"step": 2}, "answers": {"TOOL:-:0": {"id": "i", "value": 1}}}
        write = _write(
            _msg(1),
            status=ThreadStatus.INTERRUPTED,
            next_node="TOOL",
            meta=meta,
            interrupt=_INTERRUPT,
            node="TOOL",
        )
        seq = await checkpointer.aput("t", write, parent_seq=None)
        snap = await checkpointer.aget("t")
        assert snap is not None
        assert (snap.thread_id, snap.seq, snap.status, snap.next_node) == (
            "t",
            seq,
            ThreadStatus.INTERRUPTED,
            "TOOL",
        )
        assert snap.meta == meta
        assert snap.interrupt == _INTERRUPT
        assert snap.messages == [_msg(1)]

    async def test_messages_accumulate_across_checkpoints_in_order(
        self, checkpointer: Checkpointer
    ) -> None:
        await checkpointer.aput("t", _write(_msg(1)), parent_seq=None)
        await checkpointer.aput("t", _write(_msg(2, "assistant"), _msg(3, "tool")), parent_seq=1)
        await checkpointer.aput("t", _write(status=ThreadStatus.DONE, next_node=None), parent_seq=2)
        snap = await checkpointer.aget("t")
        assert snap is not None
        assert [m["id"] for m in snap.messages] == ["msg_1", "msg_2", "msg_3"]
        assert snap.status is ThreadStatus.DONE
        assert snap.next_node is None

    async def test_seq_counts_up_from_one(self, checkpointer: Checkpointer) -> None:
        seqs = [await checkpointer.aput("t", _write(), parent_seq=None)]
        for _ in range(3):
            seqs.append(await checkpointer.aput("t", _write(), parent_seq=seqs[-1]))
        assert seqs == [1, 2, 3, 4]

    async def test_a_stale_parent_seq_is_refused_and_nothing_is_written(
        self, checkpointer: Checkpointer
    ) -> None:
        await checkpointer.aput("t", _write(_msg(1)), parent_seq=None)
        await checkpointer.aput("t", _write(_msg(2)), parent_seq=1)
        with pytest.raises(CheckpointConflict):
            await checkpointer.aput("t", _write(_msg(99)), parent_seq=1)
        snap = await checkpointer.aget("t")
        assert snap is not None
        assert snap.seq == 2
        assert [m["id"] for m in snap.messages] == ["msg_1", "msg_2"]
        assert len(await checkpointer.alist("t")) == 2

    async def test_several_steps_go_in_one_write_numbered_in_order(
        self, checkpointer: Checkpointer
    ) -> None:
        first = [_write(_msg(1), node=None), _write(_msg(2), node="MAIN", next_node="TOOL")]
        assert await checkpointer.aput_steps("t", first, parent_seq=None) == 2
        paused = _write(
            _msg(3),
            status=ThreadStatus.INTERRUPTED,
            next_node="TOOL",
            interrupt=_INTERRUPT,
            node="TOOL",
        )
        assert await checkpointer.aput_steps("t", [_write(node="TOOL"), paused], parent_seq=2) == 4
        snap = await checkpointer.aget("t")
        assert snap is not None
        assert (snap.seq, snap.status, snap.interrupt) == (
            4,
            ThreadStatus.INTERRUPTED,
            _INTERRUPT,
        )
        assert [m["id"] for m in snap.messages] == ["msg_1", "msg_2", "msg_3"]
        log = await checkpointer.alist("t")
        assert [(r.seq, r.node, r.status) for r in log] == [
            (1, None, ThreadStatus.RUNNING),
            (2, "MAIN", ThreadStatus.RUNNING),
            (3, "TOOL", ThreadStatus.RUNNING),
            (4, "TOOL", ThreadStatus.INTERRUPTED),
        ]

    async def test_steps_written_together_keep_their_own_times(
        self, checkpointer: Checkpointer
    ) -> None:
        import dataclasses

        times = [1_700_000_000.25, 1_700_000_007.5]
        steps = [dataclasses.replace(_write(_msg(n)), at=at) for n, at in enumerate(times)]
        await checkpointer.aput_steps("t", steps, parent_seq=None)
        log = await checkpointer.alist("t")
        assert [round(r.created_at, 3) for r in log] == times

    async def test_no_steps_is_a_clear_refusal(self, checkpointer: Checkpointer) -> None:
        with pytest.raises(ValueError, match="at least one step"):
            await checkpointer.aput_steps("t", [], parent_seq=None)
        assert await checkpointer.aget("t") is None

    async def test_several_steps_on_a_stale_parent_are_all_refused(
        self, checkpointer: Checkpointer
    ) -> None:
        await checkpointer.aput("t", _write(_msg(1)), parent_seq=None)
        await checkpointer.aput("t", _write(_msg(2)), parent_seq=1)
        with pytest.raises(CheckpointConflict):
            await checkpointer.aput_steps("t", [_write(_msg(8)), _write(_msg(9))], parent_seq=1)
        snap = await checkpointer.aget("t")
        assert snap is not None and snap.seq == 2
        assert [m["id"] for m in snap.messages] == ["msg_1", "msg_2"]

    async def test_a_new_thread_needs_parent_seq_none(self, checkpointer: Checkpointer) -> None:
        with pytest.raises(CheckpointConflict):
            await checkpointer.aput("t", _write(_msg(1)), parent_seq=1)
        assert await checkpointer.aget("t") is None
        await checkpointer.aput("t", _write(_msg(1)), parent_seq=None)
        with pytest.raises(CheckpointConflict):
            await checkpointer.aput("t", _write(_msg(2)), parent_seq=None)

    async def test_threads_are_isolated(self, checkpointer: Checkpointer) -> None:
        await checkpointer.aput("a", _write(_msg(1)), parent_seq=None)
        await checkpointer.aput("b", _write(_msg(2), next_node="TOOL"), parent_seq=None)
        a, b = await checkpointer.aget("a"), await checkpointer.aget("b")
        assert a is not None and b is not None
        assert [m["id"] for m in a.messages] == ["msg_1"]
        assert (b.next_node, [m["id"] for m in b.messages]) == ("TOOL", ["msg_2"])
        await checkpointer.adelete("a")
        assert await checkpointer.aget("a") is None
        assert await checkpointer.aget("b") is not None

    async def test_alist_returns_the_log_oldest_first(self, checkpointer: Checkpointer) -> None:
        await checkpointer.aput("t", _write(_msg(1), node=None), parent_seq=None)
        await checkpointer.aput(
            "t",
            _write(_msg(2), _msg(3), node="MAIN", next_node="TOOL"),
            parent_seq=1,
        )
        await checkpointer.aput(
            "t",
            _write(status=ThreadStatus.INTERRUPTED, next_node="TOOL", interrupt=_INTERRUPT),
            parent_seq=2,
        )
        log = await checkpointer.alist("t")
        assert [r.seq for r in log] == [1, 2, 3]
        assert [r.message_count for r in log] == [1, 2, 0]
        assert [r.node for r in log][:2] == [None, "MAIN"]
        assert [r.status for r in log] == [
            ThreadStatus.RUNNING,
            ThreadStatus.RUNNING,
            ThreadStatus.INTERRUPTED,
        ]
        assert [r.interrupt_id for r in log] == [None, None, "int_1"]
        assert log[1].next_node == "TOOL"
        assert log[0].created_at <= log[2].created_at

    async def test_adelete_forgets_the_thread(self, checkpointer: Checkpointer) -> None:
        await checkpointer.aput("t", _write(_msg(1)), parent_seq=None)
        await checkpointer.adelete("t")
        assert await checkpointer.aget("t") is None
        assert await checkpointer.alist("t") == []
        assert await checkpointer.aput("t", _write(_msg(2)), parent_seq=None) == 1
        await checkpointer.adelete("never-existed")

    async def test_stored_data_cannot_be_changed_through_objects(
        self, checkpointer: Checkpointer
    ) -> None:
        message = _msg(1)
        meta: dict[str, Any] = {"answers": {"k": {"id": "i", "value": [1]}}}
        await checkpointer.aput("t", _write(message, meta=meta), parent_seq=None)
        message["content"] = "changed after writing"
        meta["answers"]["k"]["value"].append(2)
        first = await checkpointer.aget("t")
        assert first is not None
        first.messages[0]["content"] = "changed after reading"
        first.messages.append(_msg(9))
        first.meta["answers"].clear()
        again = await checkpointer.aget("t")
        assert again is not None
        assert again.messages == [_msg(1)]
        assert again.meta == {"answers": {"k": {"id": "i", "value": [1]}}}

    async def test_each_write_carries_only_its_own_messages(
        self, checkpointer: Checkpointer
    ) -> None:
        seq = None
        for n in range(300):
            seq = await checkpointer.aput("t", _write(_msg(n)), parent_seq=seq)
        snap = await checkpointer.aget("t")
        assert snap is not None
        assert [m["id"] for m in snap.messages] == [f"msg_{n}" for n in range(300)]
        log = await checkpointer.alist("t")
        assert {r.message_count for r in log} == {1}

    async def test_a_tool_call_cut_short_is_run_again_or_asked_about(
        self, checkpointer: Checkpointer
    ) -> None:
        """What the runtime records of a call in flight survives the store: after a crash
        inside the tools, the idempotent one runs again with the same key, and the other
        becomes a question about its outcome, not a second effect."""
        keys: list[tuple[str, str]] = []

        @tool(idempotent=True)
        def reserve(n: int) -> str:
            """Reserve stock (once per key)."""
            keys.append(("reserve", idempotency_key()))
            if len(keys) == 1:
                raise _Killed
            return "reserved"

        def charge(n: int) -> str:
            """Charge a card."""
            keys.append(("charge", idempotency_key()))
            if len(keys) == 3:
                raise _Killed
            return "charged"

        def script(messages: list[Any], tools: Any) -> Any:
            if trailing_tool_results(messages):
                return Reply("Done.")
            return Reply("", CallTool("reserve", n=1), CallTool("charge", n=1))

        def graph() -> Any:
            model = ScriptedModel(script)
            return ReactAgent(model, tools=[reserve, charge]).compile(checkpointer=checkpointer)

        config = {"thread_id": "t"}
        with pytest.raises(_Killed):
            await graph().ainvoke({"messages": [{"role": "user", "content": "go"}]}, config)
        with pytest.raises(_Killed):
            await graph().ainvoke({"messages": []}, config)
        out = await graph().ainvoke({"messages": []}, config, ResponseGranularity.PARTIAL)
        assert [name for name, _ in keys] == ["reserve", "reserve", "charge"]
        assert keys[0][1] == keys[1][1] != keys[2][1]
        request = out["interrupt"]
        assert request["reason"] == "uncertain_outcome" and request["value"]["key"] == keys[2][1]
        done = await graph().ainvoke(
            {"resume": {"outcome": "confirm"}, "resume_interrupt_id": request["id"]},
            config,
            ResponseGranularity.PARTIAL,
        )
        assert len(keys) == 3 and done["interrupt"] is None
        assert done["messages"][-1].text() == "Done."


class _Killed(BaseException):
    """Stands in for the process dying inside a tool."""
