"""JSON whose shape imagekit does not own, typed as what it is: one recursive type, and readers
that narrow a value to the kind its reader needs. Pure.

An engine's `info` and `image inspect`, a registry's manifests, cosign's envelopes, pip's list,
a probe's facts, run.json as a later run reads it: each is a `JsonValue`, and a value is checked
(`isinstance`, or a reader below) where it is used, so a document that says something
unexpected reads as absent instead of failing far from where it was parsed. The documents
imagekit writes itself are TypedDicts, or records (whose JSON form is a `JsonObject`).
"""

from __future__ import annotations

from typing import Annotated, TypeAlias

from pydantic import WithJsonSchema

# A type alias pydantic can also validate and describe (Python 3.11 has no `type` statement).
from typing_extensions import TypeAliasType

JsonValue = TypeAliasType(
    "JsonValue", "str | int | float | bool | list[JsonValue] | dict[str, JsonValue] | None"
)
JsonObject: TypeAlias = dict[str, JsonValue]
# A record's field of JSON facts (a probe's facts, a cell, an engine), validated as JSON; its
# schema is what it was when the values were untyped, so the schema files did not change.
JsonObjectField = Annotated[
    JsonObject, WithJsonSchema({"additionalProperties": True, "type": "object"})
]


def as_object(value: JsonValue) -> JsonObject:
    """`value` when it is a JSON object; an empty one otherwise (absent, or something else)."""
    return value if isinstance(value, dict) else {}


def as_list(value: JsonValue) -> list[JsonValue]:
    """`value` when it is a JSON array; an empty one otherwise (absent, or something else)."""
    return value if isinstance(value, list) else []


def as_number(value: JsonValue) -> float:
    """`value` when it is a JSON number (an int stays one); 0 otherwise."""
    return value if isinstance(value, int | float) else 0
