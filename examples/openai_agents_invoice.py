"""An OpenAI Agents SDK agent whose payments a reviewer approves in the portal.

    python examples/openai_agents_invoice.py run|ask|resume

``run`` asks and waits in one go; ``ask`` stops once the requests are raised (the run's
state saved), and ``resume``, in a later process, waits for the answers and finishes.
Settings come from the environment: PORTAL_URL, PORTAL_TOKEN, OPENAI_BASE_URL,
OPENAI_API_KEY, STATE_FILE and PAID_LOG (where ``pay_invoice`` writes). Run it as a
script, not with ``-m``: the SDK's package is ``agents``, like the portal's runtime.
"""

import asyncio
import json
import os
import sys
import types
import uuid
from pathlib import Path

from openai import AsyncOpenAI

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    RunState,
    function_tool,
    set_tracing_disabled,
)

# The portal's three client files (portal_client, signing, portal_openai_agents) under a
# name of their own; in your project, copy them into a package instead.
portal_runtime = types.ModuleType("portal_runtime")
portal_runtime.__path__ = [str(Path(__file__).resolve().parents[1] / "agents")]
sys.modules["portal_runtime"] = portal_runtime

from portal_runtime.portal_client import PortalClient  # noqa: E402
from portal_runtime.portal_openai_agents import ask_portal, run_with_portal  # noqa: E402

set_tracing_disabled(True)  # no traces sent anywhere


@function_tool(needs_approval=True)
def pay_invoice(invoice: int, amount: float) -> str:
    """Pay an invoice."""
    with open(os.environ["PAID_LOG"], "a") as log:
        log.write(json.dumps({"invoice": invoice, "amount": amount}) + "\n")
    return f"Invoice {invoice} paid: ${amount:.2f}"


agent = Agent(
    name="invoice-bot",
    instructions="Pay the invoices you are asked to pay, with pay_invoice.",
    tools=[pay_invoice],
    model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=AsyncOpenAI()),
)
portal = PortalClient(os.environ["PORTAL_URL"], os.environ["PORTAL_TOKEN"])
state_file = Path(os.environ.get("STATE_FILE", "invoice-run.json"))


async def main(mode: str) -> None:
    # The run's own id (the requests' idempotency keys come from it), kept with its state.
    run_id = f"invoice-{uuid.uuid4().hex[:12]}"

    def save(state: str) -> None:  # before anyone is asked
        state_file.write_text(json.dumps({"run_id": run_id, "state": state}))

    if mode == "ask":
        result = await Runner.run(agent, "Pay invoice 7: $120 to ACME.")
        state = result.to_state()
        save(state.to_string())
        requests = await ask_portal(
            portal, state.get_interruptions(), agent="invoice-bot", run_id=run_id
        )
        print(json.dumps({"asked": [r.id for r in requests.values()]}))
        return
    start = "Pay invoice 7: $120 to ACME."
    if mode == "resume":
        saved = json.loads(state_file.read_text())  # noqa: ASYNC240 (a small file, once)
        run_id, start = saved["run_id"], await RunState.from_string(agent, saved["state"])
    result = await run_with_portal(
        Runner, agent, start, portal, agent_name="invoice-bot", run_id=run_id, save_state=save
    )
    state_file.unlink(missing_ok=True)  # noqa: ASYNC240 (done: nothing left to resume)
    print(json.dumps({"output": result.final_output}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "run"))
