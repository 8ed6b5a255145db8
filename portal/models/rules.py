"""Decision rules: ``Rule`` (a named, ordered switch), ``RuleVersion`` (what a rule says,
written once per edit), ``RuleSimulation`` (a version run against past decisions, and who
ran it) and ``RuleHit`` (a request a rule acted on: what its caps count). The matching and
the deciding are ``portal.reviews.rules``'; docs/rules.md says how a rule reads."""

from __future__ import annotations

import hashlib
from typing import Any, NoReturn

from django.conf import settings
from django.db import models
from django.utils import timezone

from portal.models.chain import canonical
from portal.models.decisions import ImmutableRecordError
from portal.models.requests import Interrupt

_WRITTEN_ONCE = (
    "a rule version is a record: an edit writes a new version and the old one is kept "
    "(only its activation is stamped on it, once)"
)

# What a version says, in canonical order: its hash covers these and nothing else.
VERSION_FIELDS = (
    "rule_id",
    "number",
    "agent",
    "reason",
    "tool",
    "conditions",
    "action",
    "refusal_reason",
    "route_group",
    "route_approvals",
    "names_risk",
    "cap_per_hour",
    "cap_amount_field",
    "cap_amount_per_day",
    "position",
    "written_by_id",
    "written_at",
)


def rule_words(name: str, number: int) -> str:
    """How a rule's version is named wherever a decision shows who made it: "rule R v3"."""
    return f"rule {name} v{number}"


def rule_of(decision: Any) -> dict[str, Any] | None:
    """The rule version that decided ``decision`` (name, version, hash as it decided), or
    None when a person or the system did: the API's and the exports' ``rule``."""
    version = decision.rule_version
    if version is None:
        return None
    return {"name": version.rule.name, "version": version.number, "hash": decision.rule_hash}


class Rule(models.Model):
    """A decision rule: its name, its place in the order (first match wins), whether it
    is switched on, and the version that decides while it is."""

    name = models.CharField(max_length=120, unique=True)
    # Lowest first; ties by id. Requests no switched-on rule matches go to people.
    position = models.PositiveIntegerField(default=100)
    # Off takes effect at once: every request reads it from the database when it arrives.
    enabled = models.BooleanField(default=False)
    active_version = models.ForeignKey(
        "RuleVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["position", "id"]
        permissions = [("manage_rules", "Can write, simulate, activate and switch off rules")]

    def __str__(self) -> str:
        return self.name


class RuleVersionQuerySet(models.QuerySet["RuleVersion"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"RuleVersion.objects.update() refused: {_WRITTEN_ONCE}")

    def delete(self) -> NoReturn:
        raise ImmutableRecordError(f"RuleVersion.objects.delete() refused: {_WRITTEN_ONCE}")


class RuleVersion(models.Model):
    """What a rule says, as one edit wrote it; never changed afterwards (its ``hash``
    seals it), apart from the stamp of its activation."""

    class Action(models.TextChoices):
        APPROVE = "approve", "approve"
        REFUSE = "refuse", "refuse with a reason"
        ROUTE = "route", "route to people"

    rule = models.ForeignKey(Rule, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()  # 1, 2, 3... within its rule
    # What it matches ("" = any): the request's agent, reason and tool.
    agent = models.CharField(max_length=64, blank=True)
    reason = models.CharField(max_length=64, blank=True)
    tool = models.CharField(max_length=128, blank=True)
    # A JSON Schema the request must satisfy (docs/rules.md names the document it sees).
    conditions = models.JSONField(default=dict, blank=True)
    action = models.CharField(max_length=16, choices=Action.choices)
    refusal_reason = models.TextField(blank=True)  # required when it refuses
    # Routing: the group the request is assigned to, and the approvals it then needs.
    route_group = models.CharField(max_length=150, blank=True)
    route_approvals = models.PositiveSmallIntegerField(null=True, blank=True)
    # The high-risk tools this rule may approve: it approves no other high-risk request.
    names_risk = models.JSONField(default=list, blank=True)
    # Caps: past one, requests go to people and an operator is told.
    cap_per_hour = models.PositiveIntegerField(null=True, blank=True)
    cap_amount_field = models.CharField(max_length=200, blank=True)  # a JSON pointer
    cap_amount_per_day = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    # The rule's place in the order once this version is activated (lower first): an
    # order that decides which rule acts is part of what a second person approves.
    position = models.PositiveIntegerField(default=100)
    written_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="rule_versions"
    )
    written_at = models.DateTimeField(default=timezone.now, editable=False)
    hash = models.CharField(max_length=64, editable=False)
    # Stamped once, when it is switched on (never by its writer).
    activated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="rule_activations",
    )
    activated_at = models.DateTimeField(null=True, blank=True)

    objects = RuleVersionQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "number"], name="ruleversion_one_number")
        ]
        ordering = ["rule", "-number"]

    def __str__(self) -> str:
        return rule_words(self.rule.name, self.number)

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
            self.hash = self.content_hash()
        else:
            stored = RuleVersion.objects.filter(pk=self.pk).values_list("hash", flat=True).first()
            if stored != self.content_hash():
                raise ImmutableRecordError(
                    f"rule version {self.pk} cannot be changed: {_WRITTEN_ONCE}"
                )
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ImmutableRecordError(f"rule version {self.pk} cannot be deleted: {_WRITTEN_ONCE}")

    def content(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in VERSION_FIELDS}

    def content_hash(self) -> str:
        return hashlib.sha256(canonical(self.content()).encode("utf-8")).hexdigest()


class RuleSimulation(models.Model):
    """A version run against the decisions of the last ``days`` days, and who ran it: a
    version is switched on only after one."""

    version = models.ForeignKey(RuleVersion, on_delete=models.PROTECT, related_name="simulations")
    run_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="rule_simulations"
    )
    run_at = models.DateTimeField(default=timezone.now, editable=False)
    days = models.PositiveIntegerField()
    # The figures: decisions looked at, matched, by action, agreed, disagreed, and the
    # disagreeing requests' ids (the first few hundred).
    result = models.JSONField(default=dict)
    seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["-run_at", "-id"]

    def __str__(self) -> str:
        return f"simulation of {self.version} over {self.days} days"


class RuleHit(models.Model):
    """A request a rule version acted on (decided or routed): what the caps and the hit
    counts read. Written in the transaction of the decision or routing."""

    rule = models.ForeignKey(Rule, on_delete=models.PROTECT, related_name="hits")
    version = models.ForeignKey(RuleVersion, on_delete=models.PROTECT, related_name="hits")
    interrupt = models.OneToOneField(Interrupt, on_delete=models.CASCADE, related_name="rule_hit")
    action = models.CharField(max_length=16, choices=RuleVersion.Action.choices)
    amount = models.DecimalField(max_digits=14, decimal_places=2, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        indexes = [models.Index(fields=["rule", "created_at"], name="rulehit_recent")]

    def __str__(self) -> str:
        return f"{self.action} by {self.version} on {self.interrupt_id}"
