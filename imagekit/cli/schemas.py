"""The JSON Schemas `imagekit schema` prints, one per document it knows."""

from __future__ import annotations


def schema_text(results: bool = False, attestation: bool = False) -> str:
    """The JSON Schema `imagekit schema` prints: of matrix.yaml, of a results record
    (`results`), or of the verify attestation's predicate (`attestation`)."""
    if results:
        from imagekit.kernel.records import results_schema_text

        return results_schema_text()
    if attestation:
        from imagekit.publish.attest import predicate_schema_text

        return predicate_schema_text()
    import json

    from imagekit.matrix.schema import json_schema

    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"
