"""Django form fields from a JSON schema, and the JSON value back from the POST.

More in docs/architecture.md (`reviews/schema_forms.py`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django import forms

from agents.schema import loads

SEP = "."
JSON_FALLBACK = "json"
_SCALARS = {"string", "number", "integer", "boolean"}
_LONG_TEXT = 200


@dataclass(frozen=True)
class _Leaf:
    name: str
    path: tuple[str, ...]
    kind: str  # scalar | array | json


class _EmptyJSON:
    """Marker: a JSON textarea left empty (distinct from the JSON value null)."""


EMPTY = _EmptyJSON()


class JSONTextField(forms.CharField):
    """A textarea holding JSON; empty means "left out"."""

    widget = forms.Textarea

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 6, "class": "json-editor"}))
        super().__init__(strip=True, **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, str) or value is None:
            return value
        return json.dumps(value, indent=2, ensure_ascii=False)

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if not text:
            return EMPTY
        try:
            return loads(text)  # strict: no NaN, NUL or lone surrogates, bounded nesting
        except ValueError as exc:
            raise forms.ValidationError(f"This is not valid JSON: {exc}") from None


class LinesField(forms.CharField):
    """An array of scalars, one item per line."""

    def __init__(self, *, item_type: str, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 4}))
        super().__init__(**kwargs)
        self.item_type = item_type

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(json.dumps(v) if isinstance(v, bool) else str(v) for v in value)
        return value

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if not text:
            return None
        items: list[Any] = []
        for n, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if line:
                items.append(self._item(n, line))
        return items

    def _item(self, n: int, line: str) -> Any:
        try:
            if self.item_type == "integer":
                return int(line)
            if self.item_type == "number":
                number = float(line)
                if number - number != 0:  # nan, inf: not JSON numbers
                    raise ValueError(line)
                return number
        except ValueError:
            kind = "a whole number" if self.item_type == "integer" else "a number"
            raise forms.ValidationError(f"Line {n}: {line!r} is not {kind}.") from None
        if self.item_type == "boolean":
            lowered = line.lower()
            if lowered in ("true", "yes", "1"):
                return True
            if lowered in ("false", "no", "0"):
                return False
            raise forms.ValidationError(f"Line {n}: {line!r} is not true or false.")
        return line


class JSONNumberField(forms.FloatField):
    """A JSON number: ``5`` stays an integer, ``5.5`` is a float (so schema errors quote
    what the user typed)."""

    def to_python(self, value: Any) -> Any:
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            return int(value)
        return super().to_python(value)


class ISODateField(forms.DateField):
    widget = forms.DateInput(attrs={"type": "date"})

    def clean(self, value: Any) -> Any:
        day = super().clean(value)
        return day.isoformat() if day is not None else None


def _label(schema: dict[str, Any], name: str) -> str:
    title = schema.get("title")
    if isinstance(title, str) and title.strip():
        return title
    return name.replace("_", " ").strip().capitalize() or name


def _type(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    if kind is None and isinstance(schema.get("enum"), list):
        return "enum"
    return None


def _renderable_scalar(schema: Any) -> bool:
    if not isinstance(schema, dict) or any(k in schema for k in ("anyOf", "oneOf", "$ref")):
        return False
    kind = _type(schema)
    return kind in _SCALARS or (kind == "enum" and bool(schema["enum"]))


def _is_object(schema: Any) -> bool:
    return (
        isinstance(schema, dict)
        and schema.get("type") == "object"
        and isinstance(schema.get("properties"), dict)
        and bool(schema["properties"])
        and not any(k in schema for k in ("anyOf", "oneOf", "$ref", "patternProperties"))
    )


def _array_item_type(schema: dict[str, Any]) -> str | None:
    items = schema.get("items")
    if schema.get("type") != "array" or not isinstance(items, dict):
        return None
    if not _renderable_scalar(items):
        return None
    kind = _type(items)
    return "string" if kind == "enum" else kind


def _enum_options(schema: dict[str, Any]) -> list[Any] | None:
    items = schema.get("items")
    if schema.get("type") != "array" or not isinstance(items, dict):
        return None
    options = items.get("enum")
    if not isinstance(options, list) or not options:
        return None
    return options


class OptionsField(forms.TypedMultipleChoiceField):
    """An array of options, one checkbox each; nothing ticked leaves it out."""

    def __init__(self, *, options: list[Any], **kwargs: Any) -> None:
        # Options travel as JSON text, so numbers and booleans come back as themselves.
        choices = [(json.dumps(o), o if isinstance(o, str) else json.dumps(o)) for o in options]
        super().__init__(
            choices=choices,
            coerce=json.loads,
            empty_value=None,
            widget=forms.CheckboxSelectMultiple,
            **kwargs,
        )

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return [json.dumps(v) for v in value]
        return value


def can_render(schema: Any) -> bool:
    """True when the schema becomes proper fields rather than one JSON textarea."""
    return _is_object(schema) or _renderable_scalar(schema)


def _enum_field(schema: dict[str, Any], common: dict[str, Any]) -> forms.Field:
    values = list(schema["enum"])
    if all(isinstance(v, str) for v in values):
        choices = [("", "—")] + [(v, v) for v in values]
        return forms.ChoiceField(choices=choices, **common)
    # Non-string enums travel as JSON text and come back as the original values.
    encoded = [(json.dumps(v), json.dumps(v)) for v in values]
    return forms.TypedChoiceField(
        choices=[("", "—"), *encoded], coerce=json.loads, empty_value=None, **common
    )


def scalar_field(schema: dict[str, Any], *, name: str) -> forms.Field:
    """One form field for a scalar schema (see the module docstring)."""
    common: dict[str, Any] = {"required": False, "label": _label(schema, name)}
    if isinstance(schema.get("description"), str):
        common["help_text"] = schema["description"]
    kind = _type(schema)
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return _enum_field(schema, common)
    if kind == "boolean":
        return forms.TypedChoiceField(
            choices=[("true", "Yes"), ("false", "No")],
            coerce=lambda v: v == "true",
            empty_value=None,
            widget=forms.RadioSelect,
            **common,
        )
    # Limits become HTML attributes (help in the browser) but not Django validators: the
    # schema is checked by jsonschema, so its error lines are the only ones a limit gives.
    if kind in ("integer", "number"):
        attrs = {"min": schema.get("minimum"), "max": schema.get("maximum")}
        attrs = {k: v for k, v in attrs.items() if isinstance(v, int | float)}
        if kind == "integer":
            return forms.IntegerField(widget=forms.NumberInput(attrs=attrs), **common)
        return JSONNumberField(widget=forms.NumberInput(attrs={**attrs, "step": "any"}), **common)
    fmt = schema.get("format")
    if fmt == "email":
        return forms.EmailField(**common)
    if fmt == "date":
        return ISODateField(**common)
    max_length = schema.get("maxLength")
    long_text = name == "note" or (isinstance(max_length, int) and max_length > _LONG_TEXT)
    widget = forms.Textarea(attrs={"rows": 3}) if long_text else forms.TextInput()
    if isinstance(max_length, int):
        widget.attrs["maxlength"] = max_length
    return forms.CharField(strip=False, widget=widget, **common)


class SchemaLayout:
    """The fields for ``schema`` under ``prefix`` and how their values fit together."""

    def __init__(
        self,
        schema: Any,
        *,
        prefix: str = "value",
        initial: Any = None,
        label: str = "Answer",
        base: tuple[str, ...] = (),
    ) -> None:
        """``base`` is where this schema sits in the whole answer (``("args",)`` for the
        argument editor), so error lines about ``$.args...`` find their fields."""
        self.schema = schema
        self.prefix = prefix
        self.base = base
        self.fields: dict[str, forms.Field] = {}
        self.leaves: list[_Leaf] = []
        self.fallback = not can_render(schema)
        field: forms.Field
        if self.fallback:
            field = JSONTextField(
                required=False,
                label=label,
                help_text="Write the answer as JSON; it is checked against the request's schema.",
            )
            self._add(prefix, (), "json", field, initial, required=False)
        elif _is_object(schema):
            self._object(schema, (), initial, required=True, label="")
        else:
            field = scalar_field(schema, name=label)
            self._add(prefix, (), "scalar", field, initial, required=True)

    def _name(self, path: tuple[str, ...]) -> str:
        return SEP.join((self.prefix, *path))

    def _add(
        self,
        name: str,
        path: tuple[str, ...],
        kind: str,
        field: forms.Field,
        initial: Any,
        *,
        required: bool,
    ) -> None:
        field.json_required = required  # type: ignore[attr-defined]
        # (Not on checkboxes: the browser would then demand every one of them ticked.)
        if required and not isinstance(field.widget, forms.CheckboxSelectMultiple):
            field.widget.attrs.setdefault("required", True)
        if initial is not None:
            field.initial = initial
        self.fields[name] = field
        self.leaves.append(_Leaf(name, path, kind))

    def _object(
        self,
        schema: dict[str, Any],
        path: tuple[str, ...],
        initial: Any,
        *,
        required: bool,
        label: str,
    ) -> None:
        needed = set(schema.get("required") or [])
        values = initial if isinstance(initial, dict) else {}
        for key, sub in schema["properties"].items():
            sub = sub if isinstance(sub, dict) else {}
            sub_path = (*path, str(key))
            sub_required = required and key in needed
            sub_initial = values.get(key, sub.get("default"))
            name = self._name(sub_path)
            if _is_object(sub):
                self._object(
                    sub, sub_path, sub_initial, required=sub_required, label=_label(sub, key)
                )
                continue
            if _renderable_scalar(sub):
                field, kind = scalar_field(sub, name=str(key)), "scalar"
            elif (options := _enum_options(sub)) is not None:
                field = OptionsField(
                    options=options,
                    required=False,
                    label=_label(sub, key),
                    help_text=sub.get("description") or "",
                )
                kind = "array"
            elif (item_type := _array_item_type(sub)) is not None:
                help_text = sub.get("description") or ""
                field = LinesField(
                    item_type=item_type,
                    required=False,
                    label=_label(sub, key),
                    help_text=(help_text + " " if help_text else "") + "One item per line.",
                )
                kind = "array"
            else:
                field = JSONTextField(
                    required=False,
                    label=_label(sub, key),
                    help_text=(sub.get("description") or "") + " (JSON)",
                )
                kind = "json"
            if label:
                field.label = f"{label} › {field.label}"
            self._add(name, sub_path, kind, field, sub_initial, required=sub_required)

    # --- from the POST back to JSON ----------------------------------------------------

    def value(self, cleaned: dict[str, Any]) -> Any:
        """The JSON value from a valid form's ``cleaned_data``; empty inputs are left out."""
        if self.fallback or not _is_object(self.schema):
            raw = cleaned.get(self.prefix)
            if isinstance(raw, _EmptyJSON) or raw == "":
                return None
            return raw
        out: dict[str, Any] = {}
        for leaf in self.leaves:
            raw = cleaned.get(leaf.name)
            if isinstance(raw, _EmptyJSON) or raw is None or raw == "":
                continue
            target = out
            for part in leaf.path[:-1]:
                target = target.setdefault(part, {})
            target[leaf.path[-1]] = raw
        return out

    def field_for_error(self, line: str) -> str | None:
        """The field an error line like ``$.address.city: required`` is about, if any."""
        path = _error_path(line)
        if path is None or path[: len(self.base)] != self.base:
            return None
        path = path[len(self.base) :]
        names = {leaf.path: leaf.name for leaf in self.leaves}
        # The closest field at or above the path: "$.tags[2]" belongs to "tags".
        for end in range(len(path), -1, -1):
            if path[:end] in names:
                return names[path[:end]]
        # An error about an object ("$.address: ..."): its first field below.
        for leaf in self.leaves:
            if leaf.path[: len(path)] == path and path:
                return leaf.name
        return None

    def errors_by_field(self, lines: list[str]) -> dict[str | None, list[str]]:
        """Error lines grouped by field name (None: about the answer as a whole)."""
        grouped: dict[str | None, list[str]] = {}
        for line in lines:
            grouped.setdefault(self.field_for_error(line), []).append(line)
        return grouped


_PATH = re.compile(r"^\$((?:\.[^.\[:\s]+|\[\d+\])*)(?::|\s)")
_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")


def _error_path(line: str) -> tuple[str, ...] | None:
    match = _PATH.match(line)
    if match is None:
        return None
    return tuple(m.group(1) for m in _PART.finditer(match.group(1)) if m.group(1) is not None)
