"""Schemas and answers are untrusted: checked when raised, validated without the network
and without backtracking regular expressions."""

import time
from collections.abc import Iterator
from typing import Any

import pytest

from agents import (
    END,
    AgentState,
    InvalidInterruptError,
    Message,
    ReactAgent,
    StateGraph,
    interrupt,
)
from agents.interrupt import validate_resume
from agents.schema import (
    MAX_APPLIED,
    MAX_DEPTH,
    MAX_SCHEMA_BYTES,
    json_problem,
    loads,
    schema_problem,
)
from tests.loopback import CountingServer

from .conftest import FakeModel, call, say, user

CATASTROPHIC = "^(a+)+$"
EVIL_ANSWER = "a" * 25 + "!"


@pytest.fixture
def schema_server() -> Iterator[CountingServer]:
    with CountingServer() as server:
        yield server


def asking(schema, *, reason="input_required"):
    def ask(state: AgentState) -> Message:
        answer = interrupt({"q": 1}, message="Answer?", reason=reason, response_schema=schema)
        return Message(role="assistant", content=str(answer))

    g = StateGraph()
    g.add_node("ASK", ask)
    g.add_edge("ASK", END)
    g.set_entry_point("ASK")
    return g


async def test_a_remote_ref_in_a_raised_schema_fails_the_run_and_is_never_fetched(
    store, config, schema_server
):
    schema = {"type": "object", "properties": {"code": {"$ref": schema_server.url}}}
    graph = asking(schema).compile(checkpointer=store)
    with pytest.raises(InvalidInterruptError, match=r"\$ref.*cannot be resolved") as failed:
        await graph.ainvoke(user("hi"), config)
    assert "never fetched" in str(failed.value)
    assert schema_server.hits == 0
    latest = await store.aget(config["thread_id"])
    assert latest is None or latest.interrupt is None  # nothing waits for a person


async def test_validating_against_a_stored_schema_with_a_remote_ref_never_fetches_it(
    schema_server,
):
    schema = {"type": "object", "properties": {"code": {"$ref": schema_server.url}}}
    errors = validate_resume({"code": "x"}, schema)
    assert errors and "cannot be resolved" in errors[0]
    assert schema_server.hits == 0


async def test_a_bad_schema_raised_inside_a_tool_fails_the_run_instead_of_reaching_the_model(
    store, config
):
    def lookup(order: str) -> str:
        """Look an order up."""
        try:
            interrupt("which?", response_schema={"type": "strin"})
        except Exception:  # a tool that swallows its own errors must not hide this one
            return "swallowed"
        return "found"

    model = FakeModel(call(("lookup", {"order": "A-1"})), say("done"))
    graph = ReactAgent(model, tools=[lookup]).compile(checkpointer=store)
    with pytest.raises(InvalidInterruptError, match="metaschema"):
        await graph.ainvoke(user("hi"), config)
    assert len(model.seen) == 1  # the model never saw an error result


async def test_a_reason_longer_than_the_queue_stores_fails_the_run_with_a_clear_error(
    store, config
):
    graph = asking({"type": "string"}, reason="r" * 65).compile(checkpointer=store)
    with pytest.raises(InvalidInterruptError, match="reason is 65 characters, over the limit"):
        await graph.ainvoke(user("hi"), config)


def test_a_catastrophic_pattern_answers_in_well_under_a_second():
    keyed = {"type": "object", "patternProperties": {CATASTROPHIC: {"type": "integer"}}}
    for schema, value, expected in [
        ({"type": "string", "pattern": CATASTROPHIC}, EVIL_ANSWER, "does not match"),
        (keyed, {EVIL_ANSWER: "x"}, None),  # the key does not match: no rule applies
        ({**keyed, "additionalProperties": False}, {EVIL_ANSWER: 1}, "unexpected field"),
    ]:
        started = time.perf_counter()
        errors = validate_resume(value, schema)
        assert time.perf_counter() - started < 0.5
        assert (expected in errors[0]) if expected else errors == []


@pytest.mark.parametrize("schema", [["not", "a", "schema"], {"type": "strin"}, {"a": float("nan")}])
def test_an_answer_to_a_stored_schema_that_fails_the_check_is_refused_saying_why(schema):
    errors = validate_resume({"approved": True}, schema)
    assert len(errors) == 1 and errors[0].startswith("the request's response_schema cannot be used")


def test_patterns_still_match_and_refuse_as_the_schema_says():
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]-[0-9]{4}$"}},
        "patternProperties": {"^x-": {"type": "integer"}},
        "additionalProperties": False,
    }
    assert validate_resume({"code": "A-1001", "x-count": 3}, schema) == []
    assert validate_resume({"code": "a-1001", "x-count": "3", "other": 1}, schema) == [
        "$: unexpected field 'other'",
        "$.x-count: expected integer, got str",
        "$.code: 'a-1001' does not match '^[A-Z]-[0-9]{4}$'",
    ]


def _deep_schema(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _doubling_schema(levels: int) -> dict[str, Any]:
    """Each definition applies the next one twice: 2**levels checks of one value."""
    defs: dict[str, Any] = {
        f"d{k}": {"allOf": [{"$ref": f"#/$defs/d{k + 1}"}, {"$ref": f"#/$defs/d{k + 1}"}]}
        for k in range(levels)
    }
    defs[f"d{levels}"] = {"type": "object"}
    return {"$defs": defs, "type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}}


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": "strin"}, "metaschema"),
        ({"type": "string", "pattern": r"(a)\1"}, "not supported (invalid escape sequence"),
        ({"type": "string", "pattern": "(?=a)b"}, "Patterns are matched with RE2"),
        ({"patternProperties": {"(?<=x)y": {}}}, "$.patternProperties: the regular expression"),
        (
            {"properties": {"a": {"$ref": "#/$defs/missing"}}},
            "'#/$defs/missing' cannot be resolved",
        ),
        ({"$id": "http://127.0.0.1:9/", "properties": {"a": {"$ref": "b"}}}, "cannot be resolved"),
        (_deep_schema(MAX_DEPTH), f"nested deeper than {MAX_DEPTH} levels"),
        ({"enum": ["x" * MAX_SCHEMA_BYTES]}, f"over the limit of {MAX_SCHEMA_BYTES}"),
        ({"$schema": "http://json-schema.org/draft-04/schema#"}, "draft 2020-12"),
        ({"const": float("nan")}, "nan is not a JSON number"),
        (
            {"patternProperties": {"^a": {}}, "unevaluatedProperties": False},
            "cannot be combined with patternProperties",
        ),
        ("a string", "must be a JSON object"),
        ({"$ref": "#"}, "lead back to where they start"),
        (
            {
                "$defs": {"a": {"$dynamicAnchor": "m", "not": {"$dynamicRef": "#m"}}},
                "$ref": "#/$defs/a",
            },
            "lead back to where they start",
        ),
        (_doubling_schema(40), f"more than {MAX_APPLIED} subschemas at once"),
    ],
)
def test_a_schema_that_is_unsafe_or_broken_is_refused_with_a_reason(schema, problem):
    found = schema_problem(schema)
    assert found is not None and problem in found


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {}}},
        {"$ref": "https://json-schema.org/draft/2020-12/schema"},  # bundled, not fetched
        {"const": {"$ref": "http://127.0.0.1:9/"}},  # data, not a reference
        _deep_schema(MAX_DEPTH // 2 - 1),
        {"type": "string", "pattern": CATASTROPHIC},  # RE2 compiles it; it never backtracks
        _doubling_schema(4),
        # A tree: the reference descends into the value's items, so it ends with the value.
        {
            "$defs": {"node": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "$ref": "#/$defs/node",
        },
    ],
)
def test_a_sound_schema_passes_the_check(schema):
    assert schema_problem(schema) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ("[1e400]", "$[0]: inf is not a JSON number"),
        ('{"note": "a\\u0000b"}', "$.note: contains a NUL character"),
        ('{"a\\u0000": 1}', "a key contains a NUL character"),
        ('["\\ud800"]', "$[0]: contains a lone surrogate"),
        ("[" * 900 + "]" * 900, f"nested deeper than {MAX_DEPTH} levels"),
        ("[" * 100_000 + "]" * 100_000, f"nested deeper than {MAX_DEPTH} levels"),
    ],
)
def test_strict_json_refuses_what_a_database_or_a_parser_cannot_take(text, problem):
    with pytest.raises(ValueError) as refused:
        loads(text)
    assert problem in str(refused.value)


def test_strict_json_accepts_ordinary_data():
    text = '{"approved": true, "amount": 42.5, "tags": ["a", "é"], "n": null}'
    assert loads(text) == {"approved": True, "amount": 42.5, "tags": ["a", "é"], "n": None}
    assert json_problem([[[1]]]) is None
