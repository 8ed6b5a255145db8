"""An OpenAI Agents SDK agent whose payments a reviewer approves in the portal.

    python examples/openai_agents_invoice.py run|ask|resume|ask-hook|hook

``run`` asks and waits in one go; ``ask`` stops once the requests are raised (the run's
state saved), and ``resume``, in a later process, waits for the answers and finishes.
``ask-hook`` asks with a ``callback_url`` (CALLBACK_URL) and stops; ``hook``, later,
listens there (CALLBACK_PORT) for the portal's signed answers (PORTAL_WEBHOOK_SECRET,
printed with the token), then finishes. Also from the environment: PORTAL_URL,
PORTAL_TOKEN, OPENAI_BASE_URL, OPENAI_API_KEY, STATE_FILE and PAID_LOG (where
``pay_invoice`` writes). Run it as a script, not with ``-m``: the SDK's package is
``agents``, like the portal's runtime.
"""

import asyncio
import json
import os
import sys
import types
import uuid
from http.server import BaseHTTPRequestHandler, HTTPServer
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
from portal_runtime.portal_openai_agents import (  # noqa: E402
    apply_answers,
    ask_portal,
    collect_webhook,
    run_with_portal,
)
from portal_runtime.signing import SignatureError  # noqa: E402

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
portal = PortalClient(
    os.environ["PORTAL_URL"],
    os.environ["PORTAL_TOKEN"],
    webhook_secret=os.environ.get("PORTAL_WEBHOOK_SECRET"),
)
state_file = Path(os.environ.get("STATE_FILE", "invoice-run.json"))


async def main(mode: str) -> None:
    # The run's own id (the requests' idempotency keys come from it), kept with its state.
    run_id = f"invoice-{uuid.uuid4().hex[:12]}"

    def save(state: str) -> None:  # before anyone is asked
        state_file.write_text(json.dumps({"run_id": run_id, "state": state}))

    if mode in ("ask", "ask-hook"):
        result = await Runner.run(agent, "Pay invoice 7: $120 to ACME.")
        state = result.to_state()
        save(state.to_string())
        hook = {"callback_url": os.environ["CALLBACK_URL"]} if mode == "ask-hook" else {}
        requests = await ask_portal(
            portal, state.get_interruptions(), agent="invoice-bot", run_id=run_id, **hook
        )
        # Which request answers which tool call, for the webhooks to come.
        asked = {call_id: request.id for call_id, request in requests.items()}
        saved = {"run_id": run_id, "state": state.to_string(), "asked": asked}
        state_file.write_text(json.dumps(saved))  # noqa: ASYNC240 (a small file, once)
        print(json.dumps({"asked": list(asked.values())}))
        return
    if mode == "hook":
        saved = json.loads(state_file.read_text())  # noqa: ASYNC240 (a small file, once)
        state = await RunState.from_string(agent, saved["state"])
        answers = await asyncio.to_thread(take_webhooks, saved["asked"])
        apply_answers(state, answers)
        result = await Runner.run(agent, state)
        state_file.unlink(missing_ok=True)  # noqa: ASYNC240 (done: nothing left to resume)
        print(json.dumps({"output": result.final_output}))
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


def take_webhooks(asked: dict[str, str]) -> dict:
    """Serve CALLBACK_PORT until the portal's signed webhooks answered every asked call.
    A POST whose signature fails is refused (401) and changes nothing."""
    answers: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                collect_webhook(portal, body, self.headers.get("Portal-Signature"), asked, answers)
            except SignatureError as exc:
                self.send_response(401)
                self.end_headers()
                self.wfile.write(str(exc).encode())
                return
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    with HTTPServer(("127.0.0.1", int(os.environ["CALLBACK_PORT"])), Handler) as server:
        while not all(call_id in answers for call_id in asked):
            server.handle_request()
    return answers


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "run"))
