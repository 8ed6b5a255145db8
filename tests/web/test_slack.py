"""Deciding from Slack: a request posted with buttons to a fake Slack on loopback, signed
clicks decided through decision_submit, the message updated through response_url, and
every refusal recorded nowhere."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command
from django.urls import reverse

from portal.accounts import slack as links
from portal.models import Approval, AuditEvent, Decision, SlackLink, Subscription
from portal.notify import outbox
from portal.notify import slack as slack_messages
from portal.notify.notifier import Notifier
from tests.factories import make_interrupt, make_user

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
TEAM = "T0PORTAL"

pytestmark = [pytest.mark.django_db, pytest.mark.xdist_group("fake_slack")]


class FakeSlack:
    """Slack's Web API (``chat.postMessage``) and its ``response_url``s, on loopback:
    it keeps every request it gets, by path."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, str], dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.posts.append((self.path, headers, json.loads(body or b"{}")))
                answer = b'{"ok": true, "ts": "1700000000.000100"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def to(self, path: str) -> list[dict]:
        return [body for p, _, body in self.posts if p == path]


@pytest.fixture(scope="module")
def fake_slack():
    slack = FakeSlack()
    yield slack
    slack.server.shutdown()
    slack.server.server_close()


@pytest.fixture(autouse=True)
def slack_settings(settings, fake_slack):
    fake_slack.posts.clear()
    settings.PORTAL_SLACK_SIGNING_SECRET = SIGNING_SECRET
    settings.PORTAL_SLACK_BOT_TOKEN = "xoxb-test"
    settings.PORTAL_SLACK_API_URL = f"{fake_slack.url}/api"
    settings.PORTAL_BASE_URL = "https://portal.example.com"
    settings.PORTAL_ALLOW_PRIVATE_TARGETS = True  # the fake Slack listens on loopback


def linked(user, slack_user_id: str):
    SlackLink.objects.create(user=user, team_id=TEAM, slack_user_id=slack_user_id)
    return user


def click_body(interrupt, slack_user_id: str, fake_slack, action: str) -> bytes:
    payload = {
        "type": "block_actions",
        "user": {"id": slack_user_id, "team_id": TEAM},
        "team": {"id": TEAM},
        "response_url": f"{fake_slack.url}/response/{slack_user_id}",
        "actions": [{"action_id": action, "value": interrupt.pk, "type": "button"}],
    }
    return f"payload={json.dumps(payload)}".encode()


def signed(body: bytes, stamp: int | None = None) -> dict[str, str]:
    stamp = int(time.time()) if stamp is None else stamp
    base = f"v0:{stamp}:".encode() + body
    digest = hmac.new(SIGNING_SECRET.encode(), base, hashlib.sha256).hexdigest()
    return {"HTTP_X_SLACK_REQUEST_TIMESTAMP": str(stamp), "HTTP_X_SLACK_SIGNATURE": f"v0={digest}"}


def send(client, body: bytes, headers: dict[str, str]):
    return client.post(
        "/integrations/slack/interactions",
        body,
        content_type="application/x-www-form-urlencoded",
        **headers,
    )


def click(client, interrupt, slack_user_id, fake_slack, action=slack_messages.APPROVE):
    body = click_body(interrupt, slack_user_id, fake_slack, action)
    return send(client, body, signed(body))


def drain() -> None:
    Notifier(name="test-notifier").tick()


# --- the message -----------------------------------------------------------------------


def test_a_new_request_is_posted_to_the_slack_channel_with_buttons(fake_slack):
    outbox.subscription_save(
        subscription=Subscription(name="desk", channel="slack_app", target="C0REFUNDS"),
        user=None,
    )
    interrupt = make_interrupt()

    drain()

    [(path, headers, body)] = fake_slack.posts
    assert path == "/api/chat.postMessage"
    assert headers["authorization"] == "Bearer xoxb-test"
    assert body["channel"] == "C0REFUNDS"
    [actions] = [b for b in body["blocks"] if b["type"] == "actions"]
    buttons = {e["action_id"]: e for e in actions["elements"]}
    assert buttons[slack_messages.APPROVE]["value"] == interrupt.pk
    assert buttons[slack_messages.REJECT]["value"] == interrupt.pk
    assert buttons[slack_messages.OPEN]["url"].endswith(f"/interrupts/{interrupt.pk}/")


def test_a_request_that_needs_a_typed_answer_links_to_its_page_instead(fake_slack):
    outbox.subscription_save(
        subscription=Subscription(name="desk", channel="slack_app", target="C0REFUNDS"),
        user=None,
    )
    schema = {
        "type": "object",
        "properties": {"reply": {"type": "string"}},
        "required": ["reply"],
    }
    make_interrupt(schema=schema)

    drain()

    [body] = fake_slack.to("/api/chat.postMessage")
    [actions] = [b for b in body["blocks"] if b["type"] == "actions"]
    assert [e["action_id"] for e in actions["elements"]] == [slack_messages.OPEN]


def test_a_slack_channel_subscription_without_a_bot_token_is_refused(settings):
    settings.PORTAL_SLACK_BOT_TOKEN = ""
    with pytest.raises(outbox.TargetError, match="PORTAL_SLACK_BOT_TOKEN"):
        outbox.subscription_save(
            subscription=Subscription(name="desk", channel="slack_app", target="C0REFUNDS"),
            user=None,
        )


# --- clicks ------------------------------------------------------------------------------


def test_a_linked_reviewers_click_decides_and_the_message_shows_the_outcome(
    client, reviewer, fake_slack
):
    interrupt = make_interrupt()
    linked(reviewer, "U0RITA")

    response = click(client, interrupt, "U0RITA", fake_slack)
    drain()

    assert response.status_code == 200
    decision = Decision.objects.get()
    assert (decision.reviewer, decision.outcome) == (reviewer, "approved")
    assert decision.door == Decision.Door.SLACK
    [update] = fake_slack.to("/response/U0RITA")
    assert update["replace_original"] is True
    assert f"Approved by {reviewer.username} in Slack" in update["text"]


def test_a_click_on_reject_records_a_rejection_where_no_reason_is_needed(
    client, reviewer, fake_slack, settings
):
    settings.PORTAL_POLICIES = {"*:*": {"refusal_needs_note": False}}
    interrupt = make_interrupt()
    linked(reviewer, "U0RITA")

    click(client, interrupt, "U0RITA", fake_slack, slack_messages.REJECT)

    assert Decision.objects.get().outcome == "rejected"


def test_a_click_on_reject_that_needs_a_reason_records_nothing_and_links_to_the_page(
    client, reviewer, fake_slack
):
    interrupt = make_interrupt()
    linked(reviewer, "U0RITA")

    click(client, interrupt, "U0RITA", fake_slack, slack_messages.REJECT)

    assert not Decision.objects.exists()
    [reply] = fake_slack.to("/response/U0RITA")
    assert reply["response_type"] == "ephemeral"
    assert "Nothing was recorded" in reply["text"] and "note" in reply["text"]
    assert f"https://portal.example.com/interrupts/{interrupt.pk}" in reply["text"]


def test_a_tampered_click_is_refused_and_nothing_is_recorded(client, reviewer, fake_slack):
    interrupt = make_interrupt()
    linked(reviewer, "U0RITA")
    body = click_body(interrupt, "U0RITA", fake_slack, slack_messages.REJECT)
    headers = signed(body)
    tampered = body.replace(b"portal.reject", b"portal.approve")

    response = send(client, tampered, headers)

    assert response.status_code == 401
    assert "X-Slack-Signature" in response.content.decode()
    assert not Decision.objects.exists()
    assert fake_slack.posts == []


def test_a_stale_click_is_refused_and_nothing_is_recorded(client, reviewer, fake_slack):
    interrupt = make_interrupt()
    linked(reviewer, "U0RITA")
    body = click_body(interrupt, "U0RITA", fake_slack, slack_messages.APPROVE)

    response = send(client, body, signed(body, int(time.time()) - 6 * 60))

    assert response.status_code == 401
    assert "five minutes" in response.content.decode()
    assert not Decision.objects.exists()


def test_a_replayed_click_is_refused(client, reviewer, fake_slack):
    first, second = make_interrupt(), make_interrupt()
    linked(reviewer, "U0RITA")
    body = click_body(first, "U0RITA", fake_slack, slack_messages.APPROVE)
    headers = signed(body)
    assert send(client, body, headers).status_code == 200
    # The same signed request again, even once the first decision is undone by nothing.
    replay = send(client, body, headers)

    assert replay.status_code == 409
    assert "replay" in replay.content.decode()
    assert Decision.objects.count() == 1
    assert not Decision.objects.filter(interrupt=second).exists()


def test_an_unlinked_slack_user_is_told_how_to_link_and_nothing_is_recorded(
    client, reviewer, fake_slack
):
    interrupt = make_interrupt()

    response = click(client, interrupt, "U0STRANGER", fake_slack)

    assert response.status_code == 200
    assert not Decision.objects.exists() and not Approval.objects.exists()
    [reply] = fake_slack.to("/response/U0STRANGER")
    assert reply["response_type"] == "ephemeral" and reply["replace_original"] is False
    assert "not linked" in reply["text"]
    assert "https://portal.example.com/profile/?slack=" in reply["text"]


def test_a_linked_user_without_the_decide_permission_is_refused(client, auditor, fake_slack):
    interrupt = make_interrupt()
    linked(auditor, "U0AUDIT")

    click(client, interrupt, "U0AUDIT", fake_slack)

    assert not Decision.objects.exists()
    [reply] = fake_slack.to("/response/U0AUDIT")
    assert reply["response_type"] == "ephemeral"
    assert "cannot decide" in reply["text"]


def test_the_requester_is_refused_under_separation_of_duties(client, fake_slack):
    requester = linked(make_user("sam", role="support"), "U0SAM")
    requester.groups.add(*make_user("r-tmp", role="reviewer").groups.all())
    interrupt = make_interrupt(owner=requester)

    click(client, interrupt, "U0SAM", fake_slack)

    assert not Decision.objects.exists() and not Approval.objects.exists()
    [reply] = fake_slack.to("/response/U0SAM")
    assert reply["response_type"] == "ephemeral"
    assert "Nothing was recorded" in reply["text"]
    assert "separation of duties" in reply["text"]


def test_under_a_quorum_the_first_click_is_a_vote_and_the_second_voter_decides(
    client, reviewer, second_reviewer, fake_slack, settings
):
    settings.PORTAL_POLICIES = {"refunds:*": {"approvals_required": 2}}
    interrupt = make_interrupt()
    linked(reviewer, "U0RITA")
    linked(second_reviewer, "U0ROB")

    click(client, interrupt, "U0RITA", fake_slack)
    assert Approval.objects.count() == 1 and not Decision.objects.exists()
    body = click_body(interrupt, "U0RITA", fake_slack, slack_messages.APPROVE)
    again = send(client, body, signed(body, int(time.time()) - 30))  # the same voter again
    assert again.status_code == 200
    assert Approval.objects.count() == 1
    click(client, interrupt, "U0ROB", fake_slack)
    drain()

    decision = Decision.objects.get()
    assert (decision.reviewer, decision.door) == (second_reviewer, Decision.Door.SLACK)
    assert [vote.door for vote in Approval.objects.all()] == ["slack", "slack"]
    to_rita = fake_slack.to("/response/U0RITA")
    [refused] = [m for m in to_rita if m.get("response_type") == "ephemeral"]
    assert "Nothing was recorded" in refused["text"]
    [vote] = [m for m in to_rita if m.get("response_type") == "in_channel"]
    assert f"{reviewer.username} voted to approve" in vote["text"]
    [update] = [m for m in fake_slack.to("/response/U0ROB") if m.get("replace_original")]
    assert "Approved by" in update["text"]


def test_a_request_that_needs_a_typed_answer_is_not_decided_by_a_click(
    client, reviewer, fake_slack
):
    schema = {"type": "object", "properties": {"reply": {"type": "string"}}}
    interrupt = make_interrupt(schema=schema)
    linked(reviewer, "U0RITA")

    click(client, interrupt, "U0RITA", fake_slack)

    assert not Decision.objects.exists()
    assert "open it in the portal" in fake_slack.to("/response/U0RITA")[0]["text"]


def test_the_interactions_endpoint_is_not_there_without_a_signing_secret(client, settings):
    settings.PORTAL_SLACK_SIGNING_SECRET = ""

    assert client.post("/integrations/slack/interactions", {}).status_code == 404


# --- the link, from the profile ---------------------------------------------------------


def test_a_user_links_their_slack_identity_once_from_their_profile(client, reviewer):
    code = links.slack_link_code(team_id=TEAM, slack_user_id="U0RITA")
    client.force_login(reviewer)

    page = client.get(reverse("profile"), {"slack": code}).content.decode()
    assert "U0RITA" in page and "Link this Slack account" in page
    response = client.post(reverse("slack_link"), {"code": code})

    assert response.status_code == 302
    link = SlackLink.objects.get()
    assert (link.user, link.team_id, link.slack_user_id) == (reviewer, TEAM, "U0RITA")
    assert "Unlink Slack" in client.get(reverse("profile")).content.decode()
    [event] = AuditEvent.objects.filter(action="slack.link")
    assert (event.actor, event.target_id) == (reviewer, str(reviewer.pk))
    assert event.detail == {"team": TEAM, "slack_user": "U0RITA"}
    call_command("verify_audit", stdout=io.StringIO())


def test_a_forged_link_code_links_nothing(client, reviewer):
    client.force_login(reviewer)
    code = links.slack_link_code(team_id=TEAM, slack_user_id="U0RITA")

    response = client.post(reverse("slack_link"), {"code": code[:-2] + "xx"})

    assert response.status_code == 400
    assert not SlackLink.objects.exists()
    assert not AuditEvent.objects.filter(action="slack.link").exists()


def test_a_slack_identity_linked_to_someone_else_is_not_linked_again(
    client, reviewer, second_reviewer
):
    linked(second_reviewer, "U0RITA")
    client.force_login(reviewer)
    code = links.slack_link_code(team_id=TEAM, slack_user_id="U0RITA")

    response = client.post(reverse("slack_link"), {"code": code})

    assert response.status_code == 400
    assert "another portal account" in response.content.decode()
    assert SlackLink.objects.get().user == second_reviewer
    assert not AuditEvent.objects.filter(action="slack.link").exists()


def test_unlinking_from_the_profile_stops_the_clicks(client, reviewer, fake_slack):
    linked(reviewer, "U0RITA")
    client.force_login(reviewer)
    client.post(reverse("slack_unlink"))
    client.logout()

    click(client, make_interrupt(), "U0RITA", fake_slack)

    assert not SlackLink.objects.exists() and not Decision.objects.exists()
    [event] = AuditEvent.objects.filter(action="slack.unlink")
    assert event.actor == reviewer and event.detail["slack_user"] == "U0RITA"
    client.force_login(reviewer)
    client.post(reverse("slack_unlink"))  # nothing left to unlink: nothing recorded
    assert AuditEvent.objects.filter(action="slack.unlink").count() == 1
    call_command("verify_audit", stdout=io.StringIO())
