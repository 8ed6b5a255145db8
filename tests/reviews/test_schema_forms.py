"""JSON schema -> form fields -> the JSON value back, and errors next to their fields."""

from __future__ import annotations

import pytest
from django import forms

from agents.interrupt import validate_resume
from portal.reviews.forms import DecisionForm
from portal.reviews.schema_forms import SchemaLayout, can_render
from tests.factories import make_interrupt, make_tool_approval

SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean", "title": "Looks right?"},
        "tier": {"type": "string", "enum": ["gold", "silver"], "description": "Customer tier"},
        "name": {"type": "string", "maxLength": 20},
        "email": {"type": "string", "format": "email"},
        "day": {"type": "string", "format": "date"},
        "qty": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number", "minimum": 0, "maximum": 1},
        "address": {
            "type": "object",
            "title": "Address",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
            "required": ["city"],
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "array", "items": {"type": "integer"}},
        "extra": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    },
    "required": ["ok", "tier", "address"],
    "additionalProperties": False,
}


def bound(schema, data, **kwargs):
    layout = SchemaLayout(schema, **kwargs)
    form_class = type("F", (forms.Form,), dict(layout.fields))
    form = form_class(data)
    return layout, form


def test_each_schema_type_becomes_the_matching_field():
    fields = SchemaLayout(SCHEMA).fields

    assert isinstance(fields["value.ok"].widget, forms.RadioSelect)
    assert isinstance(fields["value.tier"], forms.ChoiceField)
    assert [c[0] for c in fields["value.tier"].choices] == ["", "gold", "silver"]
    assert fields["value.name"].widget.attrs["maxlength"] == 20
    assert isinstance(fields["value.email"], forms.EmailField)
    assert fields["value.day"].widget.input_type == "date"
    assert isinstance(fields["value.qty"], forms.IntegerField)
    assert fields["value.qty"].widget.attrs["min"] == 1
    assert fields["value.qty"].widget.attrs["max"] == 10
    assert isinstance(fields["value.ratio"], forms.FloatField)
    assert "value.address.city" in fields and "value.address.zip" in fields
    assert isinstance(fields["value.tags"].widget, forms.Textarea)
    assert "One item per line." in fields["value.tags"].help_text
    assert isinstance(fields["value.extra"].widget, forms.Textarea)  # the JSON fallback


def test_titles_are_labels_descriptions_are_help_and_required_fields_are_marked():
    fields = SchemaLayout(SCHEMA).fields

    assert fields["value.ok"].label == "Looks right?"
    assert fields["value.tier"].help_text == "Customer tier"
    assert fields["value.address.city"].label == "Address › City"
    assert fields["value.ok"].json_required is True
    assert fields["value.address.city"].json_required is True
    assert fields["value.address.zip"].json_required is False
    assert fields["value.name"].json_required is False
    assert fields["value.tier"].widget.attrs.get("required") is True


def test_a_filled_form_becomes_the_json_value_the_schema_accepts():
    layout, form = bound(
        SCHEMA,
        {
            "value.ok": "true",
            "value.tier": "gold",
            "value.name": "Ada",
            "value.email": "ada@example.com",
            "value.day": "2026-11-29",
            "value.qty": "3",
            "value.ratio": "0.5",
            "value.address.city": "Utrecht",
            "value.address.zip": "",
            "value.tags": "vip\n\nrepeat buyer\n",
            "value.scores": "1\n2",
            "value.extra": "7",
        },
    )

    assert form.is_valid(), form.errors
    value = layout.value(form.cleaned_data)

    assert value == {
        "ok": True,
        "tier": "gold",
        "name": "Ada",
        "email": "ada@example.com",
        "day": "2026-11-29",
        "qty": 3,
        "ratio": 0.5,
        "address": {"city": "Utrecht"},
        "tags": ["vip", "repeat buyer"],
        "scores": [1, 2],
        "extra": 7,
    }
    assert validate_resume(value, SCHEMA) == []


def test_empty_inputs_are_left_out_so_the_schema_reports_them():
    layout, form = bound(SCHEMA, {"value.ok": "false"})

    assert form.is_valid(), form.errors
    value = layout.value(form.cleaned_data)

    assert value == {"ok": False}
    errors = validate_resume(value, SCHEMA)
    assert errors == ["$.tier: required", "$.address: required"]


def test_schema_errors_land_next_to_their_fields():
    layout = SchemaLayout(SCHEMA)
    lines = [
        "$.tier: required",
        "$.address.city: required",
        "$.tags[1]: expected string, got int",
        "$.qty: 11 is greater than the maximum of 10",
        "$: unexpected field 'bogus'",
    ]

    grouped = layout.errors_by_field(lines)

    assert grouped["value.tier"] == ["$.tier: required"]
    assert grouped["value.address.city"] == ["$.address.city: required"]
    assert grouped["value.tags"] == ["$.tags[1]: expected string, got int"]
    assert grouped["value.qty"] == ["$.qty: 11 is greater than the maximum of 10"]
    assert grouped[None] == ["$: unexpected field 'bogus'"]


def test_an_error_about_a_whole_nested_object_goes_to_its_first_field():
    layout = SchemaLayout(SCHEMA)

    assert layout.field_for_error("$.address: required") == "value.address.city"


def test_lines_that_are_not_numbers_are_refused_with_their_line_number():
    _, form = bound(SCHEMA, {"value.scores": "1\ntwo"})

    assert not form.is_valid()
    assert form.errors["value.scores"] == ["Line 2: 'two' is not a whole number."]


def test_a_non_string_enum_round_trips_its_values():
    schema = {"type": "object", "properties": {"level": {"enum": [1, 2, None]}}}
    layout, form = bound(schema, {"value.level": "2"})

    assert form.is_valid(), form.errors
    assert layout.value(form.cleaned_data) == {"level": 2}


@pytest.mark.parametrize(
    "schema",
    [
        {"anyOf": [{"type": "string"}, {"type": "object"}]},
        {"type": "array", "items": {"type": "object"}},
        {"type": "object"},
        {"$ref": "#/definitions/x"},
    ],
)
def test_a_schema_it_cannot_render_falls_back_to_one_json_editor(schema):
    layout, form = bound(schema, {"value": '{"free": ["form", 1]}'})

    assert not can_render(schema)
    assert layout.fallback
    assert list(layout.fields) == ["value"]
    assert form.is_valid()
    assert layout.value(form.cleaned_data) == {"free": ["form", 1]}
    assert layout.field_for_error("$.free: expected string, got list") == "value"


def test_the_json_editor_refuses_text_that_is_not_json():
    _, form = bound({"anyOf": [{"type": "string"}]}, {"value": "{not json"})

    assert not form.is_valid()
    assert form.errors["value"][0].startswith("This is not valid JSON")


def test_a_scalar_root_schema_is_one_field():
    layout, form = bound({"type": "integer", "minimum": 0}, {"value": "4"})

    assert not layout.fallback
    assert form.is_valid()
    assert layout.value(form.cleaned_data) == 4


# --- the decision form built on top --------------------------------------------------


@pytest.mark.django_db
def test_an_interrupt_without_schema_gets_approve_reject_and_a_note():
    interrupt = make_interrupt(schema=None, reason="input_required")

    form = DecisionForm(
        {"resume_interrupt_id": interrupt.pk, "action": "reject", "note": "no"},
        interrupt=interrupt,
    )

    assert form.mode == "approval"
    assert not form.can_edit_args
    assert form.is_valid(), form.errors
    assert form.value() == {"approved": False, "note": "no"}


@pytest.mark.django_db
def test_a_tool_approval_offers_argument_editing_prefilled_with_the_model_arguments():
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]

    form = DecisionForm(interrupt=interrupt)

    assert form.mode == "inbox"
    assert form.can_edit_args and form.allows_response
    # Each button says the answer it records: ignoring is not called a rejection.
    assert form.inbox_buttons() == [("accept", "Accept", "primary"), ("ignore", "Ignore", "")]
    assert form.fields[f"args.{call_id}.amount"].initial == 5000.0
    assert form.fields[f"args.{call_id}.recipient"].initial == "Alice"
    assert form.fields[f"args.{call_id}.amount"].label.startswith("Transfer funds")


@pytest.mark.django_db
@pytest.mark.parametrize(("action", "sent"), [("accept", "accept"), ("approve", "accept")])
def test_accepting_a_tool_call_without_editing_sends_no_arguments(action, sent):
    # "approve": the button of a page rendered before the typed answers, still understood.
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]

    form = DecisionForm(
        {
            "resume_interrupt_id": interrupt.pk,
            "action": action,
            f"args.{call_id}.amount": "5000.0",
            f"args.{call_id}.recipient": "Alice",
        },
        interrupt=interrupt,
    )

    assert form.is_valid(), form.errors
    assert form.value() == {"type": sent}


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["accept", "approve", "ignore", "reject"])
def test_an_answer_that_would_drop_changed_arguments_is_refused_naming_the_field(action):
    # Without JavaScript nothing asks first: the server refuses rather than lose the edit.
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]

    form = DecisionForm(
        {
            "resume_interrupt_id": interrupt.pk,
            "action": action,
            "note": "a reason",
            f"args.{call_id}.amount": "1",
            f"args.{call_id}.recipient": "Alice",
        },
        interrupt=interrupt,
    )

    assert not form.is_valid()
    assert list(form.errors) == [f"args.{call_id}.amount"]
    assert "You changed this but chose" in form.errors[f"args.{call_id}.amount"][0]


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["accept", "ignore", "reject"])
def test_an_answer_that_would_drop_a_typed_response_is_refused_naming_the_field(action):
    interrupt = make_tool_approval()

    form = DecisionForm(
        {
            "resume_interrupt_id": interrupt.pk,
            "action": action,
            "note": "a reason",
            "response": "Send $500 now, the rest later.",
        },
        interrupt=interrupt,
    )

    assert not form.is_valid()
    assert "response" in form.errors
    assert "You wrote a response but chose" in form.errors["response"][0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("post", "answer"),
    [
        (
            {"action": "edit", "amount": "4000", "recipient": "Alice"},
            {"type": "edit", "args": {"CALL": {"amount": 4000.0, "recipient": "Alice"}}},
        ),
        (
            {"action": "response", "response": "Ask for the invoice first."},
            {"type": "response", "args": "Ask for the invoice first."},
        ),
        ({"action": "ignore", "note": "not ours"}, {"type": "ignore", "note": "not ours"}),
        # A page rendered before the typed answers posts reject: the "no" it was.
        ({"action": "reject", "note": "not ours"}, {"approved": False, "note": "not ours"}),
    ],
)
def test_each_typed_answer_to_a_tool_approval_is_built_from_its_form(post, answer):
    interrupt = make_tool_approval()
    call_id = interrupt.value["tool_calls"][0]["id"]
    data = {"resume_interrupt_id": interrupt.pk, "action": post.pop("action")}
    for key, value in post.items():
        data[f"args.{call_id}.{key}" if key in ("amount", "recipient") else key] = value

    form = DecisionForm(data, interrupt=interrupt)

    assert form.is_valid(), form.errors
    expected = dict(answer)
    if "args" in expected and isinstance(expected["args"], dict):
        expected["args"] = {call_id: expected["args"]["CALL"]}
    assert form.value() == expected


@pytest.mark.django_db
def test_a_response_to_a_tool_approval_needs_its_text():
    interrupt = make_tool_approval()

    form = DecisionForm(
        {"resume_interrupt_id": interrupt.pk, "action": "response", "response": ""},
        interrupt=interrupt,
    )

    assert not form.is_valid()
    assert form.errors["response"] == ["Write the response the agent should get."]


@pytest.mark.django_db
def test_a_schema_with_its_own_note_does_not_get_a_second_note_field():
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}, "note": {"type": "string"}},
    }
    interrupt = make_interrupt(schema=schema, reason="input_required")

    form = DecisionForm(interrupt=interrupt)

    assert form.mode == "schema"
    assert "note" not in form.fields
    assert "value.note" in form.fields


@pytest.mark.django_db
@pytest.mark.parametrize(
    "schema", [{"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "string"}]
)
def test_an_empty_answer_is_refused_rather_than_sent_as_a_cancellation(schema):
    interrupt = make_interrupt(schema=schema, reason="input_required")

    form = DecisionForm({"resume_interrupt_id": interrupt.pk, "value": ""}, interrupt=interrupt)

    assert not form.is_valid()
    assert form.errors["value"] == ["Write an answer."]


OPTIONS_SCHEMA = {
    "type": "object",
    "properties": {
        "channels": {
            "type": "array",
            "title": "Notify by",
            "items": {"enum": ["email", "sms", "post"]},
            "uniqueItems": True,
        },
        "levels": {"type": "array", "items": {"type": "integer", "enum": [1, 2, 3]}},
    },
    "required": ["channels"],
    "additionalProperties": False,
}


def test_an_array_of_options_becomes_checkboxes_not_a_textarea():
    fields = SchemaLayout(OPTIONS_SCHEMA).fields

    channels = fields["value.channels"]
    assert isinstance(channels.widget, forms.CheckboxSelectMultiple)
    assert [label for _, label in channels.choices] == ["email", "sms", "post"]
    # A required array must not make the browser demand every box ticked.
    assert "required" not in channels.widget.attrs
    assert isinstance(fields["value.levels"].widget, forms.CheckboxSelectMultiple)


def test_ticked_options_become_the_array_with_their_own_types():
    from django.http import QueryDict

    data = QueryDict(mutable=True)
    data.setlist("value.channels", ['"email"', '"post"'])
    data.setlist("value.levels", ["2", "3"])
    layout, form = bound(OPTIONS_SCHEMA, data)

    assert form.is_valid(), form.errors
    value = layout.value(form.cleaned_data)

    assert value == {"channels": ["email", "post"], "levels": [2, 3]}
    assert validate_resume(value, OPTIONS_SCHEMA) == []


def test_no_ticked_option_leaves_the_array_out_so_the_schema_reports_it():
    layout, form = bound(OPTIONS_SCHEMA, {})

    assert form.is_valid(), form.errors
    value = layout.value(form.cleaned_data)

    assert value == {}
    assert validate_resume(value, OPTIONS_SCHEMA) == ["$.channels: required"]


def test_an_option_that_is_not_offered_is_refused():
    from django.http import QueryDict

    data = QueryDict(mutable=True)
    data.setlist("value.channels", ['"fax"'])
    _, form = bound(OPTIONS_SCHEMA, data)

    assert not form.is_valid()
    assert "value.channels" in form.errors
