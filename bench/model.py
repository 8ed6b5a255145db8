"""One model call on a long history: the runtime's model client against the ``openai``
client's own call, on the same server.

A ReAct model node sends the whole history on each call, so what a call costs the caller
on top of the model's own time grows with the thread. Ours is ``OpenAIChatModel.agenerate``
(``agents/models/openai_client.py``, streamed, as a worker runs it); the other is
``AsyncOpenAI().chat.completions.create(..., stream=True)`` with the stream read to its
end, the call the peer's model node makes (``bench/e2e_peer_graph.py``, not streamed).
Both ask ``bench.e2e``'s fake OpenAI-compatible server process on loopback
(``agents.testing.fake_openai``), which answers both alike (a call of the refund tool),
with histories of 10, 100 and 1,000 messages of about 200 bytes, in blocks that take
turns. Per call: the wall time (p50, p95) and this process's CPU time.

Run: ``.venv-bench/bin/python -m bench.model``; ``BENCH_MODEL_CALLS`` sets the calls per
block. The section "A model call on a long history" of docs/benchmarks.md is replaced.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench import e2e
from bench.report import load_note, machine, percentile, table, write_section

HISTORIES = (10, 100, 1000)
CALLS = int(os.environ.get("BENCH_MODEL_CALLS", "20"))
BLOCKS = 6  # per side and history, taking turns
TOOL = {
    "type": "function",
    "function": {
        "name": "issue_refund",
        "description": "Refund an order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
            "required": ["order_id", "amount"],
        },
    },
}


def _history(n: int) -> list[Any]:
    from agents.state import Message

    words = "Refund $42.50 for order A-1001, it arrived broken; the box was crushed. "
    return [
        Message(role="user" if k % 2 == 0 else "assistant", content=(words * 3)[:200])
        for k in range(n)
    ]


async def _timed(call: Callable[[], Awaitable[object]], calls: int) -> tuple[list[float], float]:
    walls = []
    cpu = time.process_time()
    for _ in range(calls):
        began = time.perf_counter()
        await call()
        walls.append(time.perf_counter() - began)
    return walls, time.process_time() - cpu


async def _run(url: str) -> list[list[object]]:
    import openai

    from agents.models.openai_client import OpenAIChatModel

    ours = OpenAIChatModel("gpt-bench", api_key="bench", base_url=url)
    client = openai.AsyncOpenAI(api_key="bench", base_url=url, max_retries=0)
    rows: list[list[object]] = []
    try:
        for n in HISTORIES:
            history = _history(n)
            wire = [message.to_openai() for message in history]

            async def ours_call(history: list[Any] = history) -> object:
                return await ours.agenerate(history, [TOOL])

            async def openai_call(wire: list[Any] = wire) -> object:
                stream = await client.chat.completions.create(
                    model="gpt-bench", messages=wire, tools=[TOOL], stream=True
                )
                return [chunk async for chunk in stream]

            sides = {"ours (OpenAIChatModel)": ours_call, "openai's create()": openai_call}
            walls: dict[str, list[float]] = {name: [] for name in sides}
            cpu = dict.fromkeys(sides, 0.0)
            for call in sides.values():
                await _timed(call, 3)  # warm-up
            for block in range(BLOCKS):
                order = list(sides) if block % 2 == 0 else list(reversed(sides))
                for name in order:
                    spent, seconds = await _timed(sides[name], CALLS)
                    walls[name] += spent
                    cpu[name] += seconds
            for name in sides:
                calls = len(walls[name])
                rows.append(
                    [
                        n,
                        name,
                        calls,
                        percentile(walls[name], 50) * 1000,
                        percentile(walls[name], 95) * 1000,
                        cpu[name] * 1000 / calls,
                    ]
                )
    finally:
        await ours.aclose()
        await client.close()
    return rows


def main() -> None:
    load = os.getloadavg()
    url = e2e.fake_model_url()  # bench.e2e's, over HTTPS with BENCH_E2E_MODEL=openai-tls
    os.environ.update(e2e.model_trust())
    rows = asyncio.run(_run(url))
    ratios = []
    for k in range(0, len(rows), 2):
        ours, theirs = rows[k], rows[k + 1]
        ratios.append([ours[0], theirs[3] / ours[3], theirs[4] / ours[4], theirs[5] / ours[5]])
    body = "\n\n".join(
        [
            "Command: `.venv-bench/bin/python -m bench.model`.",
            f"Machine: {machine()}; {load_note(load)}.",
            "One call offers one tool and is answered, streamed, with a call of it "
            f"(`bench.e2e`'s fake model), the history holding N messages of about 200 "
            f"bytes; {BLOCKS} blocks of {CALLS} calls per "
            "side and history, the sides taking turns. CPU: this process's, per call (the "
            "fake server runs in a process of its own).",
            table(["history", "client", "calls", "p50 ms", "p95 ms", "client CPU ms/call"], rows),
            "openai's create() / ours (above 1: ours is faster or cheaper):",
            table(["history", "p50", "p95", "client CPU"], ratios),
        ]
    )
    print(body)
    write_section("model-history", "A model call on a long history", body)


if __name__ == "__main__":
    main()
