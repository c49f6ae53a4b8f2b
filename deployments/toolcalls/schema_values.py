"""Converts unescaped XML parameter text to JSON by the tool's JSON schema.

Qwen3-Coder and Qwen3.5 write `<parameter=P>\\nVALUE\\n</parameter>` with no escaping and no
type (Qwen3-Coder chat template; vLLM `qwen3coder_tool_parser.py`), so the type comes from the
request's schema: string / integer / number / boolean / null / object / array. A value that does
not fit its declared type is kept as a string rather than dropped.

DeepSeek DSML (`dsml.py`) declares each value's kind itself (`string="true"`: literal text,
`string="false"`: JSON); `flagged_to_json` takes that flag first and the schema second.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

_INTEGER = re.compile(r"-?(?:0|[1-9]\d*)")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
# Order in which the declared types of a union are tried; "string" always fits, so it is last.
_TYPE_ORDER = ("null", "boolean", "integer", "number", "object", "array", "string")


def schema_types(schema: dict[str, Any] | None) -> list[str]:
    """The JSON types a parameter schema allows, in trial order (empty if unconstrained)."""
    if not schema:
        return []
    found: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        found.add(declared)
    elif isinstance(declared, list):
        found.update(t for t in declared if isinstance(t, str))
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            if isinstance(sub, dict):
                found.update(schema_types(sub))
    if not found and isinstance(schema.get("enum"), list):
        found.update(_json_type(v) for v in schema["enum"])
    return [t for t in _TYPE_ORDER if t in found]


def streams_as_string(schema: dict[str, Any] | None) -> bool:
    """Whether a value is a plain string that can be streamed before it ends.

    True for `"type": "string"` and for parameters the schema does not describe (their text is
    kept verbatim, as vLLM does); any other type needs the whole value to convert it.
    """
    types = schema_types(schema)
    return not types or types == ["string"]


def accepts_string(schema: dict[str, Any] | None) -> bool:
    """Whether a parameter may be a string: the schema allows one or says nothing."""
    types = schema_types(schema)
    return not types or "string" in types


def flagged_to_json(text: str, declared_string: bool | None, schema: dict[str, Any] | None) -> str:
    """JSON text for a value whose writer declared whether it is a string (DSML `string=`).

    The flag decides, the schema is the second opinion:

    * declared a string: the text verbatim, unless the schema rules strings out; then it is
      converted by the schema as `to_json` does (`"3"` for an integer parameter gives `3`), and
      kept as the string when no declared type fits;
    * declared JSON: the parsed value when it is JSON (NaN and Infinity are not) and fits the
      schema's types (an integer fits `number`; `null` always passes: a missing value is not the
      text "null"); a JSON string the schema rules out is converted as above; any other misfit
      becomes the text as a string if the schema allows strings, else stays the model's JSON
      value. Text that is not JSON is converted as `to_json` does, which keeps it as a string
      when nothing fits;
    * no flag: as `to_json`.

    Args:
        text: The value exactly as written between the tags.
        declared_string: True for `string="true"`, False for `string="false"`, None if absent.
        schema: The parameter's JSON schema, or None when the tool does not describe it.
    """
    types = schema_types(schema)
    if declared_string is None or (declared_string and types and "string" not in types):
        return to_json(text, schema)
    if declared_string:
        return json.dumps(text, ensure_ascii=False)
    try:
        value = parse_json(text)
    except ValueError:
        return to_json(text, schema)
    kind = _json_type(value)
    if not types or kind in types or (kind == "integer" and "number" in types) or value is None:
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        return to_json(value, schema)
    if "string" in types:
        return json.dumps(text, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


def parse_json(text: str) -> Any:
    """`json.loads` as RFC 8259 reads it: NaN and Infinity are not JSON.

    Raises:
        ValueError: `text` is not one JSON value (surrounding whitespace is allowed).
    """
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strip_value(raw: str) -> str:
    """Remove exactly one leading and one trailing newline (the format's separators)."""
    return raw.removeprefix("\n").removesuffix("\n")


def to_json(text: str, schema: dict[str, Any] | None) -> str:
    """JSON text for a parameter's value `text` (separator newlines already stripped)."""
    value = text.strip()
    for kind in schema_types(schema):
        if kind == "null" and value.lower() in ("null", "none"):
            return "null"
        if kind == "boolean" and value.lower() in ("true", "false"):
            return value.lower()
        if kind == "integer" and _INTEGER.fullmatch(value):
            try:
                return str(int(value))
            except ValueError:  # over Python's 4,300 digits: no client could read it either
                continue
        if kind == "number" and _NUMBER.fullmatch(value):
            return value
        if kind in ("object", "array"):
            parsed = _container(value, dict if kind == "object" else list)
            if parsed is not None:
                return parsed
    return json.dumps(text, ensure_ascii=False)


def _container(value: str, kind: type) -> str | None:
    """JSON text of `value` if it is a JSON (or Python-literal) object/array of `kind`."""
    try:
        parsed = parse_json(value)
    except ValueError:  # not JSON, nested too deeply, or an integer over 4,300 digits
        try:
            parsed = ast.literal_eval(value)  # models sometimes write {'a': 1} or True
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    if not isinstance(parsed, kind):
        return None
    try:
        return json.dumps(parsed, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):  # a set or bytes from a Python literal, or a NaN
        return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else "object"
