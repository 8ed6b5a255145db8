"""Requests raised over the API by agents that run outside the portal."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from portal.models.requests import Interrupt
from portal.models.tokens import ApiToken


class ExternalRequest(models.Model):
    """An approval request raised over the API by an agent that runs outside the portal.

    It is an ordinary ``Interrupt`` on a ``Thread`` of its own, written through the
    checkpointer like any pause, so the queue, history, metrics, policies and the decision
    service treat it like any other. What differs lives here: who raised it and how the
    answer goes back (a signed webhook to ``callback_url``, or the requester's long-poll).
    The thread has no graph: its decision closes it instead of queueing a resume
    (``portal.reviews.external.external_request_close``).
    """

    class Source(models.TextChoices):
        """How the agent reached the portal: which door raised the request."""

        CLIENT = "client", "Python client or plain HTTP"
        LANGGRAPH = "langgraph", "LangGraph adapter"
        MCP = "mcp", "MCP approval gateway"
        OPENAI_AGENTS = "openai-agents", "OpenAI Agents SDK adapter"

    interrupt = models.OneToOneField(
        Interrupt, primary_key=True, on_delete=models.CASCADE, related_name="external"
    )
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="external_requests",
        db_index=False,  # external_request_idempotency (Meta) serves lookups by requester
    )
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Empty: the requester sent none. Otherwise unique per requester (Meta): the same key
    # twice finds the first request, even when both arrive at once.
    idempotency_key = models.CharField(max_length=200, blank=True)
    # sha256 of the fields that made the request: a reused key with other fields is refused.
    fingerprint = models.CharField(max_length=64, editable=False)
    external_ref = models.CharField(max_length=200, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.CLIENT)
    callback_url = models.URLField(max_length=500, blank=True)
    # The requesting token's webhook secret when the request was made, so a later change
    # of the token does not leave an answer unsigned.
    callback_secret = models.CharField(max_length=64, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the answer reached the agent: its long-poll read it, or its webhook was taken.
    collected_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "outside request"
        permissions = [("raise_request", "Can raise approval requests as an external agent")]
        constraints = [
            models.UniqueConstraint(
                fields=["requester", "idempotency_key"],
                name="external_request_idempotency",
                condition=~Q(idempotency_key=""),
            ),
        ]

    def __str__(self) -> str:
        return f"external request {self.interrupt_id}"
