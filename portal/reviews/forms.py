"""The decision form, shared by the interrupt page and the Django admin.

More in docs/architecture.md (`reviews/forms.py`)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from agents import inbox
from portal.errors import DecisionRefused
from portal.models import Approval, Decision, Interrupt, policies
from portal.reviews.decisions import decision_submit
from portal.reviews.schema_forms import SchemaLayout
from portal.reviews.words import action_tone, action_words, note_help, tool_words

APPROVE, REJECT, EDIT, SUBMIT = "approve", "reject", "edit", "submit"
ACCEPT, RESPOND, IGNORE = "accept", "response", "ignore"  # with EDIT: agents.inbox's types


def _args_schema(interrupt: Interrupt, args: Any = None) -> dict[str, Any] | None:
    """The arguments of the tool calls a request is about (``args``, by default the
    ``args`` part of a yes/no approval schema), each call titled by its tool."""
    if args is None:
        schema = interrupt.response_schema or {}
        args = (schema.get("properties") or {}).get("args")
    calls = interrupt.tool_calls
    if not calls:
        return None
    if not isinstance(args, dict) or not isinstance(args.get("properties"), dict):
        return None
    names = {call.id: call.name for call in calls}
    # Titled by the tool in words; a call id means nothing to a reviewer, so calls of the
    # same tool are told apart by number.
    titles = [tool_words(str(names.get(call_id) or "tool")) for call_id in args["properties"]]
    properties = {
        call_id: {
            **sub,
            "title": title if titles.count(title) == 1 else f"{title} (call {n})",
        }
        for n, (title, (call_id, sub)) in enumerate(
            zip(titles, args["properties"].items(), strict=True), start=1
        )
        if isinstance(sub, dict)
    }
    return {**args, "properties": properties} if properties else None


def _own_args_schema(interrupt: Interrupt) -> dict[str, Any] | None:
    """The ``args`` of a yes/no schema raised from inside a tool (no calls to key them
    by): the fields the tool lets a reviewer change, as they are."""
    if interrupt.tool_calls or not interrupt.tool_call_id:
        return None
    schema = interrupt.response_schema or {}
    args = (schema.get("properties") or {}).get("args")
    if isinstance(args, dict) and isinstance(args.get("properties"), dict) and args["properties"]:
        return args
    return None


def original_args(interrupt: Interrupt) -> dict[str, Any]:
    return {call.id: call.args for call in interrupt.tool_calls}


class DecisionForm(forms.Form):
    """A decision on one interrupt; ``value()`` is what goes to ``decision_submit``."""

    resume_interrupt_id = forms.CharField(widget=forms.HiddenInput)
    action = forms.ChoiceField(
        choices=[
            (APPROVE, "Approve"),
            (REJECT, "Reject"),
            (EDIT, "Approve edited"),
            (SUBMIT, "Submit"),
            (ACCEPT, "Accept"),
            (RESPOND, "Respond"),
            (IGNORE, "Ignore"),
        ],
        required=False,
        widget=forms.HiddenInput,
    )
    note = forms.CharField(
        required=False,
        strip=False,
        label="Note",
        help_text="Recorded with your answer.",
        widget=forms.Textarea(attrs={"rows": 3}),
    )

    def __init__(self, *args: Any, interrupt: Interrupt, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.interrupt = interrupt
        self.fields["resume_interrupt_id"].initial = interrupt.pk
        self.fields["note"].widget.attrs["maxlength"] = settings.PORTAL_MAX_NOTE_CHARS
        schema = interrupt.response_schema
        self.layout: SchemaLayout | None = None
        self.args_layout: SchemaLayout | None = None
        self.declared = inbox.declared(schema)
        if self.declared is not None:
            self.mode = "inbox"
            self._inbox_fields(self.declared)
        elif inbox.is_yes_no(schema):
            self.mode = "approval"
            args_schema = _args_schema(interrupt)
            initial: dict[str, Any] | None = original_args(interrupt)
            if args_schema is None and (own := _own_args_schema(interrupt)) is not None:
                # A tool that asks itself (the refunds demo) and lets its own arguments be
                # changed: its schema's defaults are the arguments asked for.
                args_schema, initial = own, None
            if args_schema is not None:
                self.args_layout = SchemaLayout(
                    args_schema, prefix="args", initial=initial, base=("args",)
                )
                for field in self.args_layout.fields.values():
                    # Prefilled; an empty required argument is the schema's to report.
                    field.widget.attrs.pop("required", None)
                self.fields.update(self.args_layout.fields)
        else:
            self.layout = SchemaLayout(schema, prefix="value")
            self.mode = "json" if self.layout.fallback else "schema"
            self.fields.update(self.layout.fields)
            props = schema.get("properties") if isinstance(schema, dict) else None
            if isinstance(props, dict) and "note" in props:
                # The schema asks for a note itself; one note field is enough.
                del self.fields["note"]
        if "note" in self.fields:
            # Speaks of the refusal this request offers, not of "a rejection" everywhere.
            needed = policies.policy_for(interrupt.agent, interrupt.reason).refusal_needs_note
            self.fields["note"].help_text = note_help(self.refusals, needed=needed)

    @property
    def refusals(self) -> list[str]:
        """The answers on offer that decline: ``reject`` (a yes/no request) or ``ignore``."""
        if self.declared is not None:
            return [IGNORE] if IGNORE in self.declared.actions else []
        return [REJECT] if self.mode == "approval" else []

    def _inbox_fields(self, declared: inbox.Declared) -> None:
        if EDIT in declared.actions and declared.args_schema is not None:
            # A high-risk tool's approval offers its calls' arguments by call id: each
            # call gets a section titled by its tool in words.
            args_schema = _args_schema(self.interrupt, declared.args_schema)
            self.args_layout = SchemaLayout(
                args_schema or declared.args_schema,
                prefix="args",
                initial=declared.args,
                base=("args",),
            )
            for field in self.args_layout.fields.values():
                field.widget.attrs.pop("required", None)  # prefilled; the schema reports
            self.fields.update(self.args_layout.fields)
        if RESPOND in declared.actions:
            self.fields["response"] = forms.CharField(
                required=False,
                strip=True,
                label="Your response",
                help_text="Sent to the agent instead of going ahead.",
                widget=forms.Textarea(attrs={"rows": 3}),
            )

    # --- what the template needs -------------------------------------------------------

    def inbox_buttons(self) -> list[tuple[str, str, str]]:
        """(action, label, tone) of the answers a declaring request allows that are a
        plain button (edit and response sit with their fields)."""
        actions = self.declared.actions if self.declared else []
        return [(a, action_words(a), action_tone(a)) for a in actions if a in (ACCEPT, IGNORE)]

    @property
    def allows_response(self) -> bool:
        return self.declared is not None and RESPOND in self.declared.actions

    @property
    def can_edit_args(self) -> bool:
        return self.args_layout is not None

    def value_fields(self) -> list[forms.BoundField]:
        names = self.layout.fields if self.layout else {}
        return [self[name] for name in names]

    @property
    def args_open(self) -> bool:
        """Show the argument editor unfolded (after an edit or an error in it)."""
        if not self.is_bound or self.args_layout is None:
            return False
        return self.data.get("action") == EDIT or any(
            name in self.errors for name in self.args_layout.fields
        )

    def args_fields(self) -> list[forms.BoundField]:
        names = self.args_layout.fields if self.args_layout else {}
        return [self[name] for name in names]

    # --- POST -> JSON --------------------------------------------------------------------

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.declared is not None:
            return self._clean_inbox(cleaned, self.declared)
        action = cleaned.get("action") or (SUBMIT if self.mode != "approval" else "")
        if self.mode == "approval" and action not in (APPROVE, REJECT, EDIT):
            raise forms.ValidationError("Choose approve or reject.")
        if action == EDIT and not self.can_edit_args:
            raise forms.ValidationError("This request has no arguments to edit.")
        cleaned["action"] = action
        if action in (APPROVE, REJECT):
            self._keep_typed(action, edit=EDIT)
        if self.layout is not None and not self.errors and self.layout.value(cleaned) is None:
            # An empty answer would mean "cancel the request" to the runtime; a reviewer
            # who left the box empty did not mean that.
            self.add_error(self.layout.prefix, "Write an answer.")
        return cleaned

    def _clean_inbox(self, cleaned: dict[str, Any], declared: inbox.Declared) -> dict[str, Any]:
        action = cleaned.get("action") or ""
        # A page rendered before high-risk approvals declared their answers still posts
        # approve or reject: approve is accept by its new name, and reject stays the "no"
        # it was (``value``), which goes to the agent as an ignore.
        action = {APPROVE: ACCEPT}.get(action, action)
        if action == REJECT and IGNORE in declared.actions:
            cleaned["action"] = REJECT
            self._keep_typed(REJECT, edit=EDIT)
            self._keep_response(REJECT, cleaned)
            return cleaned
        if action not in declared.actions:
            allowed = ", ".join(action_words(a).lower() for a in declared.actions)
            raise forms.ValidationError(f"This request allows only: {allowed}.")
        if action == EDIT and self.args_layout is None:
            raise forms.ValidationError("This request has no arguments to edit.")
        if action == RESPOND and not cleaned.get("response"):
            self.add_error("response", "Write the response the agent should get.")
        if action != RESPOND:
            self._keep_response(action, cleaned)
        if action in (ACCEPT, IGNORE):
            self._keep_typed(action, edit=EDIT)
        cleaned["action"] = action
        return cleaned

    def _keep_response(self, action: str, cleaned: dict[str, Any]) -> None:
        if cleaned.get("response"):
            self.add_error(
                "response",
                f"You wrote a response but chose {action_words(action)!r}: send the response, "
                "or clear it and choose again. Nothing was recorded.",
            )

    def _keep_typed(self, action: str, *, edit: str) -> None:
        """Refuse an answer that would drop arguments the reviewer changed: typed work is
        never thrown away silently (the page asks first; this is the path without it)."""
        if self.args_layout is None:
            return
        # Only fields the POST carries: a client that sends no editor changed nothing.
        posted = [name for name in self.args_layout.fields if name in self.data]
        changed = [name for name in self.changed_data if name in posted]
        for name in changed:
            self.add_error(
                name,
                f"You changed this but chose {action_words(action)!r}, which does not use "
                f"it: choose {action_words(EDIT if self.declared else 'approve_edited')!r}, "
                "or put it back. Nothing was recorded.",
            )

    def value(self) -> Any:
        """The answer as JSON (call after ``is_valid()``)."""
        data = self.cleaned_data
        note = data.get("note") or ""
        if self.declared is not None and data["action"] == REJECT:
            return {"approved": False, "note": note} if note else {"approved": False}
        if self.declared is not None:
            answer: dict[str, Any] = {"type": data["action"]}
            if data["action"] == EDIT and self.args_layout is not None:
                answer["args"] = self.args_layout.value(data)
            elif data["action"] == RESPOND:
                answer["args"] = data.get("response") or ""
            if note:
                answer["note"] = note
            return answer
        if self.mode != "approval":
            assert self.layout is not None
            return self.layout.value(data)
        action = data["action"]
        value: dict[str, Any] = {"approved": action in (APPROVE, EDIT)}
        if action == EDIT and self.args_layout is not None:
            value["args"] = self.args_layout.value(data)
        schema = self.interrupt.response_schema
        if note and (schema is None or "note" in (schema.get("properties") or {})):
            value["note"] = note
        return value

    def note_text(self) -> str:
        return (self.cleaned_data.get("note") or "") if "note" in self.fields else ""

    def submit(self, reviewer: Any, *, door: str) -> Decision | Approval:
        """Record this form's answer through ``decision_submit`` (call after
        ``is_valid()``), as coming in at ``door``; a ``DecisionRefused`` propagates for
        the caller to show."""
        return decision_submit(
            interrupt=self.interrupt,
            reviewer=reviewer,
            value=self.value(),
            resume_interrupt_id=self.cleaned_data["resume_interrupt_id"],
            note=self.note_text(),
            door=door,
        )

    def show_refusal(self, refusal: DecisionRefused) -> None:
        """Put a refusal's messages on the form: schema errors next to their fields."""
        if not refusal.errors:
            self.add_error(None, refusal.message)
            return
        self.add_error(None, refusal.message)
        for line in refusal.errors:
            self.add_error(self._field_for(line), line)

    def _field_for(self, line: str) -> str | None:
        if line.startswith(("note:", "$.note:")) and "note" in self.fields:
            return "note"
        if line.startswith("$.args:") and self.data.get("action") == RESPOND:
            return "response" if "response" in self.fields else None
        for layout in (self.layout, self.args_layout):
            if layout is not None and (name := layout.field_for_error(line)):
                return name
        return None
