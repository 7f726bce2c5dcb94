"""deploy/: the Kyverno admission policy admits only images whose signed verify attestation
reached the required level.

Two checks. Its structure, by hand: the rule verifies the image signature and the imagekit
verify attestation with the same key, offline (no tlog), and its conditions ask for a passing
record at the levels named. And against Kyverno's own published schema: the pydantic models of
the `cloudcoil-models-kyverno` package (a dev extra) are generated from Kyverno 1.13's CRDs; the
policy must validate as a `ClusterPolicy`, and since those models accept unknown keys, every key
of the file is also walked against the fields of the model it lands in, so a misspelt field
(`attestation:` for `attestations:`) fails here rather than being ignored by the cluster.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from imagekit.kernel.records import LEVELS
from imagekit.publish.attest import VERIFY_PREDICATE, VerifyPredicate

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "deploy" / "kyverno-imagekit-level.yaml"


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    document = yaml.safe_load(POLICY.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def _verify_images(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for rule in policy["spec"]["rules"] for v in rule.get("verifyImages", [])]


def _offline_key(attestors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keys = [entry["keys"] for a in attestors for entry in a["entries"]]
    assert keys, "an attestor with a key"
    for key in keys:
        assert "BEGIN PUBLIC KEY" in key["publicKeys"]
        assert key["rekor"] == {"ignoreTlog": True} and key["ctlog"] == {"ignoreSCT": True}
    return keys


def test_the_policy_verifies_the_signature_and_the_verify_attestation_with_one_key(
    policy: dict[str, Any],
) -> None:
    assert policy["apiVersion"] == "kyverno.io/v1" and policy["kind"] == "ClusterPolicy"
    assert policy["spec"]["validationFailureAction"] == "Enforce"
    [rule] = policy["spec"]["rules"]
    assert rule["match"]["any"][0]["resources"]["kinds"] == ["Pod"]
    [verify] = _verify_images(policy)
    assert verify["required"] and verify["verifyDigest"] and verify["mutateDigest"]
    signer = _offline_key(verify["attestors"])
    [attestation] = verify["attestations"]
    assert attestation["type"] == VERIFY_PREDICATE
    assert _offline_key(attestation["attestors"]) == signer


def test_the_conditions_ask_for_a_passing_record_at_a_level_imagekit_writes(
    policy: dict[str, Any],
) -> None:
    [verify] = _verify_images(policy)
    [block] = verify["attestations"][0]["conditions"]
    conditions = {c["key"]: c for c in block["all"]}
    assert conditions["{{ status }}"]["operator"] == "Equals"
    assert conditions["{{ status }}"]["value"] == "pass"
    level = conditions["{{ level }}"]
    assert level["operator"] == "AnyIn" and level["value"] == ["cpu", "gpu"]
    assert set(level["value"]) <= {str(x) for x in LEVELS}
    # The keys are fields of the predicate imagekit attests (its JSON schema's properties).
    fields = VerifyPredicate.model_json_schema()["properties"]
    assert {"status", "level"} <= set(fields)


def _models(annotation: Any) -> list[type[pydantic.BaseModel]]:
    """The pydantic models an annotation may hold (through Optional, list, Union)."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple, typing.Optional) or origin:
        return [m for arg in typing.get_args(annotation) for m in _models(arg)]
    return []


def _unknown_keys(model: type[pydantic.BaseModel], value: Any, where: str) -> list[str]:
    """Every key of `value` that is no field (by alias or name) of `model`, recursively."""
    if isinstance(value, list):
        return [u for i, item in enumerate(value) for u in _unknown_keys(model, item, where)]
    if not isinstance(value, dict):
        return []
    fields = {(f.alias or name): f for name, f in model.model_fields.items()}
    fields |= dict(model.model_fields)
    found = []
    for key, item in value.items():
        field = fields.get(key)
        if field is None:
            found.append(f"{where}.{key}")
            continue
        models = _models(field.annotation)
        if models:
            found += _unknown_keys(models[0], item, f"{where}.{key}")
    return found


def test_the_policy_validates_against_kyvernos_published_crd_models(
    policy: dict[str, Any],
) -> None:
    from cloudcoil.models.kyverno import v1

    parsed = v1.ClusterPolicy.model_validate(policy)
    assert parsed.spec is not None
    assert _unknown_keys(v1.ClusterPolicy, policy, "") == []
    misspelt = yaml.safe_load(POLICY.read_text().replace("attestations:", "attestation:"))
    assert _unknown_keys(v1.ClusterPolicy, misspelt, "") == [".spec.rules.verifyImages.attestation"]
