"""The JSON Schemas imagekit publishes, by name. Pure."""

from __future__ import annotations

from imagekit.kernel.records import results_schema_text
from imagekit.matrix.schema import json_schema_text
from imagekit.publish.attest import predicate_schema_text


def schema_text(results: bool, attestation: bool) -> str:
    """The JSON Schema `imagekit schema` prints: of a results record, of the verify
    attestation's predicate, else of matrix.yaml."""
    if results:
        return results_schema_text()
    return predicate_schema_text() if attestation else json_schema_text()
