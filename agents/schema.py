"""JSON and response schemas that come from outside: what is accepted, and how answers are
validated.

Agents (and the models behind them) write the ``response_schema`` a person's answer must
fit; people and API clients write the answers. Both are untrusted, so:

- Only strict JSON is accepted (``json_problem``, ``loads``): no ``NaN`` or infinite
  numbers, no NUL character and no lone surrogate in any string or key, and nesting at
  most ``MAX_DEPTH`` levels. PostgreSQL refuses the first three in ``jsonb`` and deep
  nesting exhausts the recursion of every JSON tool, so they are refused here, the same
  way on every database.
- A schema is checked when its interrupt is raised (``schema_problem``): size, depth, the
  draft 2020-12 metaschema, every ``$ref`` resolvable inside the schema itself, and every
  regular expression one that RE2 compiles.
- Validation (``validator_for``) never touches the network: references resolve against a
  registry whose retrieval always refuses. Regular expressions (``pattern``,
  ``patternProperties``, and through them ``additionalProperties``) are matched with RE2,
  whose running time grows linearly with the text, so no answer can stall a process.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import best_match
from jsonschema_specifications import REGISTRY as SPECIFICATIONS
from referencing import Registry, Resource
from referencing.exceptions import CannotDetermineSpecification, Unresolvable
from referencing.jsonschema import DRAFT202012

__all__ = [
    "MAX_DEPTH",
    "MAX_SCHEMA_BYTES",
    "extra_properties",
    "json_problem",
    "loads",
    "regex_search",
    "schema_problem",
    "text_problem",
    "validator_for",
    "when_of",
]

MAX_DEPTH = 64
MAX_SCHEMA_BYTES = 64 * 1024
# The most subschemas one value may be checked against in one place, references
# followed: each "allOf" of two references to the next definition doubles it, so a small
# schema could otherwise make checking one answer take hours.
MAX_APPLIED = 256
# Keywords whose subschemas apply to the value itself, not to its members or items.
_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")

# Keywords whose values are data, not subschemas: a "$ref" or "pattern" inside them is text.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
_DIALECT = "https://json-schema.org/draft/2020-12/schema"


# --- strict JSON ------------------------------------------------------------------------


def text_problem(text: str) -> str | None:
    """What makes ``text`` unstorable (a NUL character, a lone surrogate), or None."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"contains a lone surrogate ({text[exc.start]!r}), which is not valid Unicode"
    return None


def _path(parts: tuple[Any, ...]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def json_problem(value: Any, *, max_depth: int = MAX_DEPTH) -> str | None:
    """The first reason ``value`` is not strict JSON data, as ``"$.path: problem"``, or None.

    Iterative, so a value nested far too deep is reported instead of exhausting the stack.
    """
    stack: list[tuple[tuple[Any, ...], Any, int]] = [((), value, 0)]
    while stack:
        parts, item, depth = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
        elif isinstance(item, bool) or item is None or isinstance(item, int):
            problem = None
        elif isinstance(item, float):
            problem = None if item - item == 0 else f"{item} is not a JSON number"
        elif isinstance(item, dict | list):
            if depth >= max_depth:
                return f"$: nested deeper than {max_depth} levels"
            if isinstance(item, list):
                stack.extend(((*parts, n), v, depth + 1) for n, v in enumerate(item))
                continue
            problem = None
            for key, v in item.items():
                if not isinstance(key, str):
                    return f"{_path(parts)}: key {key!r} is not a string"
                if (bad := text_problem(key)) is not None:
                    return f"{_path(parts)}: a key {bad}"
                stack.append(((*parts, key), v, depth + 1))
        else:
            problem = f"a {type(item).__name__} is not JSON data"
        if problem is not None:
            return f"{_path(parts)}: {problem}"
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse strict JSON; ``ValueError`` naming the problem (see ``json_problem``)."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError(f"nested deeper than {max_depth} levels") from None
    problem = json_problem(value, max_depth=max_depth)
    if problem is not None:
        raise ValueError(problem)
    return value


# --- regular expressions: RE2 ---------------------------------------------------------

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=512)
def _regex(pattern: str) -> Any:
    return re2.compile(pattern, _RE2_OPTIONS)


def _regex_error(pattern: str) -> str | None:
    try:
        _regex(pattern)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        reason = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        return reason
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def regex_search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches anywhere in ``text`` (RE2: linear time)."""
    return _regex(pattern).search(text) is not None


def extra_properties(instance: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    """Keys of ``instance`` that neither ``properties`` nor ``patternProperties`` cover."""
    properties = schema.get("properties", {})
    patterns = schema.get("patternProperties", {})
    return [
        key
        for key in instance
        if key not in properties and not any(regex_search(p, key) for p in patterns)
    ]


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    if validator.is_type(instance, "string") and not regex_search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: dict[str, Any], instance: Any, schema: Any
) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if regex_search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    extras = extra_properties(instance, schema)
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        listed = ", ".join(repr(k) for k in sorted(extras))
        yield ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


_Validator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


# --- dates: JSON Schema has no comparison of them ----------------------------------------
# ``formatMinimum``, ``formatMaximum`` and their ``formatExclusive...`` forms (as ajv-formats
# writes them) bound a string of ``format`` "date" or "date-time" by a date or time of the
# same format: "on or after 2026-01-01". A string the format cannot read is outside every
# bound (fail closed), and so is a bound that cannot be read. A date-time without an offset
# is read as UTC. Only ``validator_for(..., dates=True)`` knows them (decision rules'
# conditions); elsewhere they stay annotations, as the draft says.
DATE_BOUNDS = {
    "formatMinimum": lambda v, b: v >= b,
    "formatMaximum": lambda v, b: v <= b,
    "formatExclusiveMinimum": lambda v, b: v > b,
    "formatExclusiveMaximum": lambda v, b: v < b,
}


def when_of(text: Any, fmt: Any) -> date | datetime | None:
    """``text`` read as the ``fmt`` ("date" or "date-time") names it, or None."""
    if not isinstance(text, str) or fmt not in ("date", "date-time"):
        return None
    try:
        if fmt == "date":
            return date.fromisoformat(text) if len(text) == 10 else None
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _date_bound(keyword: str) -> Any:
    def check(validator: Any, bound: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not validator.is_type(instance, "string"):
            return
        fmt = schema.get("format")
        value, limit = when_of(instance, fmt), when_of(bound, fmt)
        if value is None or limit is None:
            yield ValidationError(f"{instance!r} cannot be compared as a {fmt} with {bound!r}")
        elif not DATE_BOUNDS[keyword](value, limit):
            yield ValidationError(f"{instance!r} is outside {keyword} {bound!r}")

    return check


_DatesValidator = validators.extend(  # type: ignore[no-untyped-call]
    _Validator, {keyword: _date_bound(keyword) for keyword in DATE_BOUNDS}
)


# --- references: never retrieved -------------------------------------------------------


def _refuse_retrieval(uri: str) -> Resource[Any]:
    # Raising here makes every reference outside the schema (and the bundled metaschemas)
    # unresolvable: validation must not fetch what an agent points it at.
    raise Unresolvable(ref=uri)


_NO_RETRIEVAL: Registry[Any] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]
_RESOLVING = SPECIFICATIONS.combine(_NO_RETRIEVAL)


# --- checking a schema ----------------------------------------------------------------


def _walk(schema: Any) -> Iterator[tuple[tuple[Any, ...], dict[str, Any], Any]]:
    """(path, subschema, resolver) for every object in the schema outside data keywords,
    with the resolver that ``$id``s along the way give it."""
    root = DRAFT202012.create_resource(schema)
    stack: list[tuple[tuple[Any, ...], Any, Any]] = [
        ((), schema, _RESOLVING.resolver_with_root(root))
    ]
    while stack:
        parts, item, resolver = stack.pop()
        if isinstance(item, list):
            stack.extend(((*parts, n), v, resolver) for n, v in enumerate(item))
            continue
        if not isinstance(item, dict):
            continue
        if parts and isinstance(item.get("$id"), str):
            resolver = resolver.in_subresource(DRAFT202012.create_resource(item))
        yield parts, item, resolver
        for key, value in item.items():
            if key not in _DATA_KEYWORDS:
                stack.append(((*parts, key), value, resolver))


def _structure_problem(schema: Any) -> str | None:
    uses_unevaluated = uses_patterns = False
    for parts, item, resolver in _walk(schema):
        where = _path(parts)
        for keyword in ("$ref", "$dynamicRef"):
            ref = item.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                resolver.lookup(ref)
            except (Unresolvable, CannotDetermineSpecification):
                return (
                    f"{where}.{keyword}: {ref!r} cannot be resolved. References are never "
                    "fetched: put the definition under $defs and refer to it as "
                    "'#/$defs/<name>'"
                )
        regexes = []
        if isinstance(item.get("pattern"), str):
            regexes.append((f"{where}.pattern", item["pattern"]))
        if isinstance(item.get("patternProperties"), dict):
            uses_patterns = True
            regexes += [(f"{where}.patternProperties", p) for p in item["patternProperties"]]
        for at, pattern in regexes:
            if (error := _regex_error(pattern)) is not None:
                return (
                    f"{at}: the regular expression {pattern!r} is not supported ({error}). "
                    "Patterns are matched with RE2: no backreferences or lookaround"
                )
        if "unevaluatedProperties" in item:
            uses_unevaluated = True
    if uses_unevaluated and uses_patterns:
        return (
            "$: unevaluatedProperties cannot be combined with patternProperties; use "
            "additionalProperties instead"
        )
    return _applied_problem(schema)


def _applied_problem(schema: Any) -> str | None:
    """Why one value would be checked against too many subschemas at once (a reference
    cycle, or more than ``MAX_APPLIED``), or None. Subschemas that apply to a value's
    members or items descend into the value, so only those applying in place add up."""
    anchors: dict[str, list[tuple[Any, Any]]] = {}
    located = list(_walk(schema))
    # Each subschema's resolver, as its "$id"s along the way give it.
    resolvers = {id(item): resolver for _parts, item, resolver in located}
    for _parts, item, resolver in located:
        if isinstance(item.get("$dynamicAnchor"), str):
            anchors.setdefault(item["$dynamicAnchor"], []).append((item, resolver))

    def in_place(item: dict[str, Any], resolver: Any) -> list[tuple[Any, Any]]:
        found: list[tuple[Any, Any]] = []
        for keyword in _IN_PLACE:
            value = item.get(keyword)
            if keyword == "dependentSchemas" and isinstance(value, dict):
                kids = list(value.values())
            else:
                kids = value if isinstance(value, list) else [value]
            # Outside the schema (a bundled metaschema's parts), the parent's resolver.
            found += [
                (kid, resolvers.get(id(kid), resolver)) for kid in kids if isinstance(kid, dict)
            ]
        for keyword in ("$ref", "$dynamicRef"):
            ref = item.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                target = resolver.lookup(ref)
            except (Unresolvable, CannotDetermineSpecification):
                continue  # refused by _structure_problem where the agent wrote it
            found.append((target.contents, target.resolver))
            if keyword == "$dynamicRef" and "#" in ref:
                found += anchors.get(ref.rsplit("#", 1)[1], [])
        return found

    sizes: dict[int, int] = {}
    for parts, start, start_resolver in located:
        if id(start) in sizes:
            continue
        on_path = {id(start)}
        # Depth first, without recursion: [subschema, resolver, what it applies, next, size].
        stack: list[list[Any]] = [[start, start_resolver, None, 0, 1]]
        while stack:
            frame = stack[-1]
            if frame[2] is None:
                frame[2] = in_place(frame[0], frame[1]) if isinstance(frame[0], dict) else []
            if frame[3] < len(frame[2]):
                kid, kid_resolver = frame[2][frame[3]]
                frame[3] += 1
                if id(kid) in sizes:
                    frame[4] += sizes[id(kid)]
                elif id(kid) in on_path:
                    return (
                        f"{_path(parts)}: its references lead back to where they start, so "
                        "checking a value against it would never end"
                    )
                else:
                    on_path.add(id(kid))
                    stack.append([kid, kid_resolver, None, 0, 1])
            else:
                stack.pop()
                on_path.discard(id(frame[0]))
                sizes[id(frame[0])] = frame[4]
                if stack:
                    stack[-1][4] += frame[4]
            if stack and stack[-1][4] > MAX_APPLIED:
                return (
                    f"{_path(parts)}: a value would be checked against more than "
                    f"{MAX_APPLIED} subschemas at once when its references are followed; "
                    "refer to each definition fewer times"
                )
    return None


_canonical_json = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode
_METASCHEMA = Draft202012Validator(Draft202012Validator.META_SCHEMA)


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` cannot be used as a response schema (one readable line), or None.

    Checks, in this order: a JSON object of strict JSON within ``MAX_DEPTH`` levels and
    ``MAX_SCHEMA_BYTES``; the draft 2020-12 metaschema; every reference resolvable without
    the network; every regular expression accepted by RE2.
    """
    if not isinstance(schema, dict):
        return f"$: a schema must be a JSON object, got {type(schema).__name__}"
    try:
        key = _canonical_json(schema)
    except (TypeError, ValueError, RecursionError):
        return json_problem(schema) or "$: the schema is not JSON data"
    return _checked(key)


@functools.lru_cache(maxsize=256)
def _checked(schema_json: str) -> str | None:
    # The metaschema costs milliseconds and a tool or an agent raises the same schema
    # again and again, so verdicts are kept by the schema's canonical text.
    size = len(schema_json.encode())
    if size > MAX_SCHEMA_BYTES:
        return f"$: {size} bytes of JSON, over the limit of {MAX_SCHEMA_BYTES}"
    try:
        schema = json.loads(schema_json)
    except RecursionError:
        return f"$: nested deeper than {MAX_DEPTH} levels"
    if not isinstance(schema, dict):
        return f"$: a schema must be a JSON object, got {type(schema).__name__}"
    problem = json_problem(schema)
    if problem is not None:
        return problem
    dialect = schema.get("$schema")
    if dialect is not None and (not isinstance(dialect, str) or dialect.rstrip("#") != _DIALECT):
        return f"$.$schema: {dialect!r} is not supported; write draft 2020-12 (or leave it out)"
    error = best_match(_METASCHEMA.iter_errors(schema))
    if error is not None:
        return f"{_path(tuple(error.absolute_path))}: {error.message} (draft 2020-12 metaschema)"
    return _structure_problem(schema)


class SchemaRefused(ValueError):
    """The schema failed ``schema_problem``; the message says why."""


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str, dates: bool = False) -> Any:
    problem = _checked(schema_json)
    if problem is not None:
        return SchemaRefused(problem)
    kind = _DatesValidator if dates else _Validator
    return kind(json.loads(schema_json), registry=_NO_RETRIEVAL)


def validator_for(schema: dict[str, Any], *, dates: bool = False) -> Any:
    """A validator for ``schema`` that never retrieves and matches with RE2; with
    ``dates``, one that also compares dates (``DATE_BOUNDS``).

    Raises ``SchemaRefused`` for a schema that ``schema_problem`` refuses (a request stored
    before schemas were checked). Schemas repeat (one per tool or agent) and building a
    validator costs more than validating a small answer, so recent ones are kept.
    """
    try:
        result = _validator(_canonical_json(schema), dates)
    except (TypeError, ValueError, RecursionError):
        result = SchemaRefused(schema_problem(schema) or "$: the schema is not JSON data")
    if isinstance(result, SchemaRefused):
        raise SchemaRefused(str(result))
    return result
