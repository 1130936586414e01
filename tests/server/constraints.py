"""Seeded structured-output constraints (JSON schemas and regexes) and their independent checks:
``json.loads`` plus a small schema checker, and ``re.fullmatch``."""

from __future__ import annotations

import json
import random
import re
from typing import Any

WORDS = ["alpha", "beta", "gamma", "delta", "red", "green", "blue", "north", "south", "east"]


def _schema_field(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["int", "enum", "bool", "str", "array", "number"])
    if kind == "int":
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(1, 500)}
    if kind == "enum":
        return {"type": "string", "enum": rng.sample(WORDS, rng.randint(2, 4))}
    if kind == "bool":
        return {"type": "boolean"}
    if kind == "str":
        return {"type": "string", "minLength": 1, "maxLength": rng.randint(3, 10)}
    if kind == "number":
        return {"type": "number", "minimum": 0, "maximum": 100}
    return {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
            "minItems": 1, "maxItems": rng.randint(1, 4)}


def _regex(rng: random.Random) -> str:
    return rng.choice([
        r"[0-9]{3}-[0-9]{4}", r"(yes|no|maybe)", r"[a-z]{2,6}@[a-z]{2,5}\.(com|org)",
        r"#[0-9a-f]{6}", r"[A-Z][a-z]{1,8} [0-9]{1,2}", r"(0|[1-9][0-9]{0,2})\.[0-9]{2}",
        r"(def|class) [a-z_]{1,8}\(\)", r"[01]{4,8}",
    ])


def constraints(seed: int = 0, count: int = 20) -> list[tuple[str, Any]]:
    """``count`` constraints: ("json_schema", schema dict) or ("regex", pattern), half each."""
    rng = random.Random(seed)
    out: list[tuple[str, Any]] = []
    for i in range(count):
        if i % 2 == 0:
            names = rng.sample(["id", "name", "kind", "score", "tags", "ok", "level"], rng.randint(1, 4))
            props = {n: _schema_field(rng) for n in names}
            out.append(("json_schema", {"type": "object", "properties": props,
                                        "required": names, "additionalProperties": False}))
        else:
            out.append(("regex", _regex(rng)))
    return out


def matches(kind: str, spec: Any, text: str) -> bool:
    if kind == "regex":
        return re.fullmatch(spec, text) is not None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return False
    return _valid(value, spec)


def _valid(value: Any, schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    if "enum" in schema and value not in schema["enum"]:
        return False
    if kind == "object":
        props = schema.get("properties", {})
        return (isinstance(value, dict) and set(schema.get("required", [])) <= set(value)
                and set(value) <= set(props) and all(_valid(value[k], props[k]) for k in value))
    if kind == "integer" and (not isinstance(value, int) or isinstance(value, bool)):
        return False
    if kind == "number" and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        return False
    if kind in ("integer", "number"):
        return schema.get("minimum", value) <= value <= schema.get("maximum", value)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str) and schema.get("minLength", 0) <= len(value) <= \
            schema.get("maxLength", len(value))
    if kind == "array":
        return (isinstance(value, list) and schema.get("minItems", 0) <= len(value)
                <= schema.get("maxItems", len(value))
                and all(_valid(v, schema["items"]) for v in value))
    return True
