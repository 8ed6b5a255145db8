"""A plain script asks the portal's reviewers before it acts.

PORTAL_URL=http://127.0.0.1:8000 PORTAL_TOKEN=prt_... .venv/bin/python -m examples.plain_script
"""

from __future__ import annotations

import os

from agents.portal_client import PortalClient


def main() -> int:
    portal = PortalClient(os.environ["PORTAL_URL"], os.environ["PORTAL_TOKEN"])
    request = portal.raise_request(
        agent="invoice-bot",
        title="Pay invoice 7",
        message="Pay **$120.00** to ACME?",
        payload={"invoice": 7, "amount": 120},
        actions=["accept", "ignore"],
        idempotency_key="invoice-7",
    )
    print(f"Waiting for a reviewer (request {request.id})...")
    answer = portal.wait(request.id).answer
    if answer is not None and answer.goes_ahead:
        print(f"Approved by {answer.decided_by}; paying.")
    else:
        print(f"Not paid: {answer.outcome if answer else 'no answer'}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
