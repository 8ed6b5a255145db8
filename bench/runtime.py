"""Pause and resume N threads with no model, ours vs LangGraph vs floor.

Each thread runs one cycle: a user message goes in, node ``agent`` appends an assistant
message, node ``approve`` calls ``interrupt()`` with a small ``response_schema`` and the run
pauses (the *pause*); then the thread is resumed with ``{"approved": True}`` naming the
interrupt id, ``approve`` runs again, appends a tool message and the run ends (the
*resume*). Ours runs on ``InMemoryCheckpointer``; LangGraph runs the same two-node graph
(plain-dict messages with an ``operator.add`` reducer, its cheapest state shape) on
``InMemorySaver``; the floor is a dict append plus a dict update, no graph.

Bytes per checkpoint: each thread is pre-seeded with a history of 10, 100 or 1,000
messages of about 200 bytes, then runs the pause. Ours: ``last_write_bytes`` (the JSON of
the pause checkpoint's delta). LangGraph: the bytes its saver stored (serde output of the
checkpoint, its metadata, the channel blobs of new versions and the pending writes).

Run: ``.venv-bench/bin/python -m bench runtime`` (``BENCH_N`` to change N;
``BENCH_PROFILE=1`` also prints a cProfile of our cycle).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import json
import operator
import os
import pstats
import random
import time
import uuid
from typing import Annotated, Any, TypedDict

from agents import (
    END,
    AgentState,
    CheckpointWrite,
    InMemoryCheckpointer,
    Message,
    ResponseGranularity,
    StateGraph,
    ThreadStatus,
    ToolNode,
    interrupt,
)
from bench.report import load_note, machine, summary_ms, table, write_section

N = int(os.environ.get("BENCH_N", "1000"))
WARMUP = 50
HISTORIES = (10, 100, 1000)
HISTORY_THREADS = 20  # threads per history size for the bytes column

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
}
PAYLOAD = {"action": "issue_refund", "order_id": "A-1001", "amount": 42.5}
PROMPT = "Approve this refund?"
RESUME = {"approved": True}

# ~200 bytes of JSON per message (ours stores {"id", "role", "content"}).
_TEXT = (
    "The customer says order A-1001 arrived broken and asks for a refund of $42.50; the "
    "order is eligible, so I am asking a reviewer to approve the refund before I issue it."
)


def text(n: int) -> str:
    return f"{n:05d} {_TEXT}"[:150]


_WORDS = (
    "order refund customer arrived broken package courier delayed invoice amount account "
    "payment card bank transfer balance approve decline reviewer policy limit request "
    "ticket shipping address return label warehouse damaged replacement credit note email "
    "phone verify identity fraud risk escalate manager support agent reply thanks sorry "
    "please today tomorrow week month number reference total tax discount coupon price "
    "item quantity size colour model serial warranty repair store online app login reset"
).split()


def history(n: int) -> list[dict[str, Any]]:
    """``n`` messages of about 200 bytes each, alternating user/assistant. The text is
    varied (seeded random words), so PostgreSQL's TOAST compression sees ordinary prose
    rather than one repeated sentence."""
    roles = ("user", "assistant")
    out = []
    for i in range(n):
        rng = random.Random(i)
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < 140:
            words.append(rng.choice(_WORDS))
        out.append({"id": f"msg_{i:016x}", "role": roles[i % 2], "content": " ".join(words)})
    return out


def message_bytes(messages: list[dict[str, Any]]) -> float:
    return sum(len(json.dumps(m, separators=(",", ":"))) for m in messages) / len(messages)


# -- ours ------------------------------------------------------------------------------------


def _agent_node(state: AgentState) -> Message:
    return Message(role="assistant", content=text(len(state.context)))


class _Approve(ToolNode):
    """Stands for ReactAgent's ToolNode asking for approval, and is written for as that one
    is: it would record a call in flight before acting (it acts on nothing here), so the
    pause goes to the store in one write, and the answer with the end."""

    async def __call__(self, state: AgentState) -> Message:
        answer = interrupt(PAYLOAD, message=PROMPT, response_schema=SCHEMA)
        content = "approved" if answer and answer["approved"] else "declined"
        return Message(role="tool", content=content)


def build_agent(model: Any = None) -> StateGraph:
    """The scenario's graph, uncompiled (also registered as the portal agent ``bench`` by
    ``bench.orm`` so real workers run it)."""
    graph = StateGraph(AgentState)
    graph.add_node("agent", _agent_node)
    graph.add_node("approve", _Approve())
    graph.set_entry_point("agent")
    graph.add_edge("agent", "approve")
    graph.add_edge("approve", END)
    return graph


def build_ours(checkpointer: Any) -> Any:
    return build_agent().compile(checkpointer=checkpointer)


async def ours_pause(graph: Any, thread_id: str) -> str:
    out = await graph.ainvoke(
        {"messages": [{"role": "user", "content": text(0)}]},
        {"thread_id": thread_id},
        response_granularity=ResponseGranularity.PARTIAL,
    )
    return str(out["interrupt"]["id"])


async def ours_resume(graph: Any, thread_id: str, interrupt_id: str) -> None:
    out = await graph.ainvoke(
        {"resume": RESUME, "resume_interrupt_id": interrupt_id},
        {"thread_id": thread_id},
        response_granularity=ResponseGranularity.PARTIAL,
    )
    assert out["interrupt"] is None and out["messages"][-1].content == "approved", out


async def ours_seed(checkpointer: Any, thread_id: str, messages: list[dict[str, Any]]) -> int:
    """A thread whose earlier conversation (``messages``) is finished; returns its seq."""
    write = CheckpointWrite(status=ThreadStatus.DONE, next_node=None, new_messages=messages)
    return int(await checkpointer.aput(thread_id, write, parent_seq=None))


# -- LangGraph -------------------------------------------------------------------------------


class LGState(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


def _lg_agent(state: LGState) -> dict[str, Any]:
    msg = {"id": f"msg_{uuid.uuid4().hex[:16]}", "role": "assistant"}
    return {"messages": [{**msg, "content": text(len(state["messages"]))}]}


def _lg_approve(state: LGState) -> dict[str, Any]:
    from langgraph.types import interrupt as lg_interrupt

    answer = lg_interrupt({"message": PROMPT, **PAYLOAD}, response_schema=SCHEMA)
    content = "approved" if answer and answer["approved"] else "declined"
    msg = {"id": f"msg_{uuid.uuid4().hex[:16]}", "role": "tool", "content": content}
    return {"messages": [msg]}


def build_langgraph(saver: Any) -> Any:
    from langgraph.graph import END as LG_END
    from langgraph.graph import START
    from langgraph.graph import StateGraph as LGStateGraph

    graph = LGStateGraph(LGState)
    graph.add_node("agent", _lg_agent)
    graph.add_node("approve", _lg_approve)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", "approve")
    graph.add_edge("approve", LG_END)
    return graph.compile(checkpointer=saver)


def lg_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def lg_pause(graph: Any, thread_id: str) -> str:
    out = graph.invoke(
        {"messages": [{"id": "msg_user", "role": "user", "content": text(0)}]},
        lg_config(thread_id),
    )
    return str(out["__interrupt__"][0].id)


def lg_resume(graph: Any, thread_id: str, interrupt_id: str) -> None:
    from langgraph.types import Command

    out = graph.invoke(Command(resume={interrupt_id: RESUME}), lg_config(thread_id))
    assert "__interrupt__" not in out and out["messages"][-1]["content"] == "approved", out


async def lg_apause(graph: Any, thread_id: str) -> str:
    out = await graph.ainvoke(
        {"messages": [{"id": "msg_user", "role": "user", "content": text(0)}]},
        lg_config(thread_id),
    )
    return str(out["__interrupt__"][0].id)


async def lg_aresume(graph: Any, thread_id: str, interrupt_id: str) -> None:
    from langgraph.types import Command

    out = await graph.ainvoke(Command(resume={interrupt_id: RESUME}), lg_config(thread_id))
    assert "__interrupt__" not in out and out["messages"][-1]["content"] == "approved", out


def lg_seed(graph: Any, thread_id: str, messages: list[dict[str, Any]]) -> None:
    """A thread whose earlier conversation is finished (as if ``approve`` wrote it last)."""
    graph.update_state(lg_config(thread_id), {"messages": messages}, as_node="approve")


def measuring_memory_saver() -> Any:
    """An ``InMemorySaver`` that counts the bytes it stores (serde output)."""
    from langgraph.checkpoint.memory import InMemorySaver

    class MeasuringSaver(InMemorySaver):
        def __init__(self) -> None:
            super().__init__()
            self.bytes_written = 0
            self.checkpoints_written = 0
            self.last_put_bytes = 0

        def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
            thread_id = config["configurable"]["thread_id"]
            ns = config["configurable"]["checkpoint_ns"]
            before = {k: v for k, v in new_versions.items()}
            out = super().put(config, checkpoint, metadata, new_versions)
            c_bytes, m_bytes, _parent = self.storage[thread_id][ns][checkpoint["id"]]
            size = len(c_bytes[1]) + len(m_bytes[1])
            size += sum(len(self.blobs[(thread_id, ns, k, v)][1]) for k, v in before.items())
            self.bytes_written += size
            self.checkpoints_written += 1
            self.last_put_bytes = size
            return out

        def put_writes(self, config, writes, task_id, task_path=""):  # type: ignore[no-untyped-def]
            key = (
                config["configurable"]["thread_id"],
                config["configurable"].get("checkpoint_ns", ""),
                config["configurable"]["checkpoint_id"],
            )
            before = sum(len(w[2][1]) for w in self.writes.get(key, {}).values())
            super().put_writes(config, writes, task_id, task_path)
            after = sum(len(w[2][1]) for w in self.writes.get(key, {}).values())
            self.bytes_written += after - before

    return MeasuringSaver()


# -- floor -----------------------------------------------------------------------------------


def floor_pause(store: dict[str, dict[str, Any]], thread_id: str) -> str:
    thread = store.setdefault(thread_id, {"messages": [], "status": "idle", "interrupt": None})
    thread["messages"].append({"role": "user", "content": text(0)})
    iid = f"int_{thread_id}"
    thread.update(status="interrupted", interrupt={"id": iid, "value": PAYLOAD})
    return iid


def floor_resume(store: dict[str, dict[str, Any]], thread_id: str, interrupt_id: str) -> None:
    store[thread_id].update(status="done", interrupt=None, answer=RESUME)


# -- timing ----------------------------------------------------------------------------------


class Timing:
    def __init__(self, name: str) -> None:
        self.name = name
        self.pause: list[float] = []
        self.resume: list[float] = []
        self.wall = 0.0

    @property
    def cycles_per_s(self) -> float:
        return len(self.pause) / self.wall

    @property
    def cycle_ms(self) -> float:
        """Mean wall time per cycle (every pause and preemption included)."""
        return self.wall / len(self.pause) * 1000

    @property
    def cycle_p50_ms(self) -> float:
        """Median of (pause + resume) per thread: robust to a busy machine's stalls."""
        return summary_ms([p + r for p, r in zip(self.pause, self.resume, strict=True)])[0]

    def row(self, bytes_cols: list[object]) -> list[object]:
        p50, p95, _ = summary_ms(self.pause)
        r50, r95, _ = summary_ms(self.resume)
        return [
            self.name,
            p50,
            p95,
            r50,
            r95,
            self.cycle_p50_ms,
            self.cycle_ms,
            round(self.cycles_per_s),
            *bytes_cols,
        ]


def thread_ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{uuid.uuid4().hex}" for _ in range(n)]


# -- bytes per checkpoint ----------------------------------------------------------------------


async def ours_bytes(size: int) -> tuple[int, float]:
    """(bytes of the pause checkpoint, mean bytes per checkpoint start->pause)."""
    cp = InMemoryCheckpointer()
    graph = build_ours(cp)
    pause_bytes: list[int] = []
    per_cp: list[float] = []
    for tid in thread_ids(f"h{size}", HISTORY_THREADS):
        await ours_seed(cp, tid, history(size))
        before_bytes, before_n = cp.bytes_written, len(await cp.alist(tid))
        await ours_pause(graph, tid)
        pause_bytes.append(cp.last_write_bytes(tid))
        written = len(await cp.alist(tid)) - before_n
        per_cp.append((cp.bytes_written - before_bytes) / written)
    return max(pause_bytes), sum(per_cp) / len(per_cp)


def lg_bytes(size: int) -> tuple[int, float]:
    saver = measuring_memory_saver()
    graph = build_langgraph(saver)
    pause_bytes: list[int] = []
    per_cp: list[float] = []
    for tid in thread_ids(f"h{size}", HISTORY_THREADS):
        lg_seed(graph, tid, history(size))
        before_bytes, before_n = saver.bytes_written, saver.checkpoints_written
        # The pause checkpoint: the last checkpoint put before the interrupt, plus the
        # pending writes (the interrupt) stored against it.
        lg_pause(graph, tid)
        written = saver.checkpoints_written - before_n
        per_cp.append((saver.bytes_written - before_bytes) / written)
        pause_bytes.append(saver.last_put_bytes)
    return max(pause_bytes), sum(per_cp) / len(per_cp)


# -- main ------------------------------------------------------------------------------------


async def run_interleaved(n: int, block: int = 50) -> tuple[Timing, Timing, Timing, Timing]:
    """All four in one process, taking turns in blocks of ``block`` threads, so a busy
    neighbour slows them all alike rather than whichever happened to be running."""
    from langgraph.checkpoint.memory import InMemorySaver

    ours_g = build_ours(InMemoryCheckpointer())
    lg_g = build_langgraph(InMemorySaver())
    lg_ag = build_langgraph(InMemorySaver())
    store: dict[str, dict[str, Any]] = {}

    async def ours_cycle(tid: str, t: Timing) -> None:
        t0 = time.perf_counter()
        iid = await ours_pause(ours_g, tid)
        t1 = time.perf_counter()
        await ours_resume(ours_g, tid, iid)
        t.pause.append(t1 - t0)
        t.resume.append(time.perf_counter() - t1)

    async def lg_async_cycle(tid: str, t: Timing) -> None:
        t0 = time.perf_counter()
        iid = await lg_apause(lg_ag, tid)
        t1 = time.perf_counter()
        await lg_aresume(lg_ag, tid, iid)
        t.pause.append(t1 - t0)
        t.resume.append(time.perf_counter() - t1)

    async def lg_sync_cycle(tid: str, t: Timing) -> None:
        t0 = time.perf_counter()
        iid = lg_pause(lg_g, tid)
        t1 = time.perf_counter()
        lg_resume(lg_g, tid, iid)
        t.pause.append(t1 - t0)
        t.resume.append(time.perf_counter() - t1)

    async def floor_cycle(tid: str, t: Timing) -> None:
        t0 = time.perf_counter()
        iid = floor_pause(store, tid)
        t1 = time.perf_counter()
        floor_resume(store, tid, iid)
        t.pause.append(t1 - t0)
        t.resume.append(time.perf_counter() - t1)

    runs = [
        (Timing("ours (agents, InMemoryCheckpointer)"), ours_cycle),
        (Timing("LangGraph invoke (InMemorySaver)"), lg_sync_cycle),
        (Timing("LangGraph ainvoke (InMemorySaver)"), lg_async_cycle),
        (Timing("floor (dict append + dict update)"), floor_cycle),
    ]
    for _timing, cycle in runs:
        scratch = Timing("warm-up")
        for tid in thread_ids("warm", WARMUP):
            await cycle(tid, scratch)
    gc.collect()
    for start in range(0, n, block):
        for timing, cycle in runs:
            ids = thread_ids("t", min(block, n - start))
            began = time.perf_counter()
            for tid in ids:
                await cycle(tid, timing)
            timing.wall += time.perf_counter() - began
    ours, lg_sync, lg_async, floor = (timing for timing, _cycle in runs)
    return ours, lg_sync, lg_async, floor


LONG_THREADS = int(os.environ.get("BENCH_LONG_THREADS", "200"))  # per history length


async def run_long(n: int = LONG_THREADS, block: int = 20) -> dict[int, dict[str, Any]]:
    """One cycle each on threads that already hold 10, 100 or 1,000 messages, ours vs
    LangGraph's ``ainvoke`` taking turns in blocks: per history length, each side's cycle
    times (wall) and CPU per cycle (``process_time``)."""
    from langgraph.checkpoint.memory import InMemorySaver

    out: dict[int, dict[str, Any]] = {}
    for size in HISTORIES:
        msgs = history(size)
        ours_cp = InMemoryCheckpointer()
        ours_g = build_ours(ours_cp)
        lg_g = build_langgraph(InMemorySaver())
        ours_ids, lg_ids = thread_ids(f"o{size}", n + WARMUP), thread_ids(f"l{size}", n + WARMUP)
        for tid in ours_ids:
            await ours_seed(ours_cp, tid, msgs)
        for tid in lg_ids:
            lg_seed(lg_g, tid, msgs)

        async def ours_cycle(tid: str, g: Any = ours_g) -> None:
            await ours_resume(g, tid, await ours_pause(g, tid))

        async def lg_cycle(tid: str, g: Any = lg_g) -> None:
            await lg_aresume(g, tid, await lg_apause(g, tid))

        sides = {"ours": (ours_cycle, ours_ids), "LangGraph ainvoke": (lg_cycle, lg_ids)}
        times: dict[str, list[float]] = {name: [] for name in sides}
        cpu: dict[str, float] = dict.fromkeys(sides, 0.0)
        for cycle, ids in sides.values():  # warm-up, not reported
            for tid in ids[:WARMUP]:
                await cycle(tid)
        gc.collect()
        for start in range(WARMUP, n + WARMUP, block):
            for name, (cycle, ids) in sides.items():
                c0 = time.process_time()
                for tid in ids[start : start + block]:
                    t0 = time.perf_counter()
                    await cycle(tid)
                    times[name].append(time.perf_counter() - t0)
                cpu[name] += time.process_time() - c0
        out[size] = {"times": times, "cpu_ms": {k: v / n * 1000 for k, v in cpu.items()}}
    return out


def long_section(long: dict[int, dict[str, Any]]) -> str:
    headers = ["history (messages)", "side", "cycle p50 ms", "cycle p95 ms", "CPU ms / cycle"]
    rows = []
    for size, got in long.items():
        for name, times in got["times"].items():
            p50, p95, _ = summary_ms(times)
            rows.append([f"{size:,}", name, p50, p95, f"{got['cpu_ms'][name]:.3f}"])
    ratio = {
        size: {
            "p50": summary_ms(got["times"]["LangGraph ainvoke"])[0]
            / summary_ms(got["times"]["ours"])[0],
            "p95": summary_ms(got["times"]["LangGraph ainvoke"])[1]
            / summary_ms(got["times"]["ours"])[1],
        }
        for size, got in long.items()
    }
    at_1000 = ratio[1000]
    cpu = [long[s]["cpu_ms"]["ours"] for s in HISTORIES]
    flat = cpu[-1] <= cpu[0] * 1.10
    lines = [
        f"- LangGraph's time / ours at {size:,} messages: p50 {r['p50']:.1f}x, p95 {r['p95']:.1f}x."
        for size, r in ratio.items()
    ]
    got = long[1000]["cpu_ms"]
    cpu_1000 = got["LangGraph ainvoke"] / got["ours"]
    lines.append(
        f"- Target at 1,000 messages, at least 3x LangGraph (issue 32): **"
        f"{'met' if min(at_1000.values()) >= 3 else 'missed'}** (p50 {at_1000['p50']:.1f}x, "
        f"p95 {at_1000['p95']:.1f}x; CPU per cycle {cpu_1000:.1f}x, which a loaded machine "
        "distorts least)."
    )
    lines.append(
        f"- Our CPU per cycle: {cpu[0]:.3f} / {cpu[1]:.3f} / {cpu[2]:.3f} ms at 10 / 100 / "
        f"1,000 messages; flat (within 10%): **{'met' if flat else 'missed'}**."
    )
    return "\n\n".join(
        [
            f"On long histories: {LONG_THREADS} threads per history length and side (after "
            f"{WARMUP} warm-up threads), each already holding 10, 100 or 1,000 messages "
            "(~200 bytes each), runs one cycle; ours and LangGraph's `ainvoke` take turns in "
            "blocks of 20 threads. CPU is the process's CPU time over each side's blocks.",
            table(headers, rows),
            "\n".join(lines),
        ]
    )


def profile(n: int = N) -> str:
    """cProfile of our N cycles; the top functions by own time and by cumulative time."""
    graph = build_ours(InMemoryCheckpointer())

    async def cycles() -> None:
        for tid in thread_ids("p", n):
            await ours_resume(graph, tid, await ours_pause(graph, tid))

    prof = cProfile.Profile()
    prof.enable()
    asyncio.run(cycles())
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)
    return out.getvalue()


def main() -> None:
    load_start = os.getloadavg()
    from importlib.metadata import version

    import langgraph  # noqa: F401  (fail early if the bench env is missing)

    lg_version = version("langgraph")
    ours, lg_sync, lg_async, floor = asyncio.run(run_interleaved(N))
    lg_best = lg_sync if lg_sync.cycle_p50_ms <= lg_async.cycle_p50_ms else lg_async

    long = asyncio.run(run_long())
    ours_b = {size: asyncio.run(ours_bytes(size)) for size in HISTORIES}
    lg_b = {size: lg_bytes(size) for size in HISTORIES}
    avg_msg = message_bytes(history(100))

    def bytes_cols(b: dict[int, tuple[int, float]] | None) -> list[object]:
        if b is None:
            return ["-"] * len(HISTORIES)
        return [f"{b[s][0]:,}" for s in HISTORIES]

    headers = [
        "implementation",
        "pause p50 ms",
        "pause p95 ms",
        "resume p50 ms",
        "resume p95 ms",
        "cycle p50 ms",
        "ms / cycle (wall mean)",
        "cycles/s",
        *[f"pause ckpt bytes @{s} msgs" for s in HISTORIES],
    ]
    rows = [
        ours.row(bytes_cols(ours_b)),
        lg_sync.row(bytes_cols(lg_b)),
        lg_async.row(bytes_cols(lg_b)),
        floor.row(bytes_cols(None)),
    ]
    per_cp_headers = ["implementation", *[f"mean bytes/ckpt start->pause @{s}" for s in HISTORIES]]
    per_cp_rows = [
        ["ours", *[f"{ours_b[s][1]:,.0f}" for s in HISTORIES]],
        ["LangGraph", *[f"{lg_b[s][1]:,.0f}" for s in HISTORIES]],
    ]
    speedup = lg_best.cycle_p50_ms / ours.cycle_p50_ms
    wall_speedup = lg_best.cycle_ms / ours.cycle_ms
    p_ratio = summary_ms(lg_best.pause)[0] / summary_ms(ours.pause)[0]
    r_ratio = summary_ms(lg_best.resume)[0] / summary_ms(ours.resume)[0]
    floor_ratio = ours.cycle_p50_ms / floor.cycle_p50_ms
    flat = ours_b[1000][0] <= ours_b[10][0] * 1.05
    lg_growth = lg_b[1000][0] / lg_b[10][0]
    met_speed = speedup >= 10
    ratios = "\n".join(
        [
            f"- Per cycle, ours vs LangGraph ({lg_best.name}, the faster of its two APIs): "
            f"**{speedup:.1f}x** faster by median cycle (pause p50 {p_ratio:.1f}x, resume p50 "
            f"{r_ratio:.1f}x; {wall_speedup:.1f}x by mean wall time per cycle, which a busy "
            f"machine's stalls distort). Target >= 10x: **{'met' if met_speed else 'missed'}**.",
            f"- Ours vs the floor: {floor_ratio:,.0f}x the floor's median time per cycle.",
            f"- Pause checkpoint bytes, ours: {ours_b[10][0]:,} / {ours_b[100][0]:,} / "
            f"{ours_b[1000][0]:,} at 10 / 100 / 1,000 messages of history. Target flat with "
            f"history: **{'met' if flat else 'missed'}**. LangGraph's grows {lg_growth:.0f}x "
            "from 10 to 1,000 messages (it re-serialises the whole `messages` channel).",
        ]
    )
    body = "\n\n".join(
        [
            "Command: `.venv-bench/bin/python -m bench runtime` (from `make .venv-bench/.synced`).",
            f"Machine: {machine()}; {load_note(load_start)}. LangGraph {lg_version}. "
            f"N = {N:,} threads per implementation "
            f"(after {WARMUP} warm-up threads), the four taking turns in blocks of 50 threads "
            "in one process; each "
            "thread runs one cycle: user message -> `agent` node appends a message -> `approve` "
            "node calls `interrupt()` with a small response schema (pause) -> resumed with "
            '`{"approved": true}` naming the interrupt id -> `approve` appends the tool '
            "result -> END (resume). No model. Messages are ~"
            f"{avg_msg:.0f} bytes of JSON.",
            table(headers, rows),
            "Bytes: ours is the JSON of the pause checkpoint's delta "
            "(`InMemoryCheckpointer.last_write_bytes`); LangGraph's is what `InMemorySaver` "
            "stored for the last checkpoint before the pause (serde output of the checkpoint, "
            f"its metadata and its new channel blobs). Max over {HISTORY_THREADS} threads per "
            "history size, each pre-seeded with that many messages. Mean bytes per checkpoint "
            "over everything written from the new message to the pause (LangGraph's includes "
            "its pending writes):",
            table(per_cp_headers, per_cp_rows),
            ratios,
            long_section(long),
        ]
    )
    title = "Runtime: pause/resume, ours vs LangGraph (in memory)"
    print(title)
    print(body)
    write_section("runtime", title, body)
    if os.environ.get("BENCH_PROFILE"):
        print(profile())
