"""`imagekit doctor --json`: the host, the engine and the verdict on each image, as one typed
JSON document. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from imagekit.doctor.verdict import Assessment, HostGpus
from imagekit.kernel.engine import EngineInfo, EngineJson
from imagekit.kernel.publish_records import AttestedLevel


class GpuJson(TypedDict):
    """One GPU of the host, as `doctor --json` shows it."""

    index: int
    name: str
    capability: str


class HostJson(TypedDict):
    """The host's driver and GPUs, as `doctor --json` shows them."""

    driver: str | None
    source: str
    problems: list[str]
    gpus: list[GpuJson]


class FindingJson(TypedDict):
    """One finding of a verdict: its level (ok, none, warn, fail) and its text."""

    level: str
    text: str


class AssessmentJson(TypedDict):
    """The verdict on one image, as `doctor --json` shows it."""

    image: str
    verdict: str
    runs: bool
    findings: list[FindingJson]
    attested: NotRequired[dict[str, str | None]]


class DoctorJson(TypedDict):
    """`imagekit doctor --json`."""

    engine: EngineJson | None
    host: HostJson
    images: list[AssessmentJson]


def _assessment_json(a: Assessment, attested: Mapping[str, AttestedLevel]) -> AssessmentJson:
    found: AssessmentJson = {
        "image": a.image,
        "verdict": str(a.verdict),
        "runs": a.runs,
        "findings": [{"level": str(f.level), "text": f.text} for f in a.findings],
    }
    if a.image in attested:
        found["attested"] = attested[a.image].to_json()
    return found


def doctor_document(
    host: HostGpus,
    assessments: list[Assessment],
    engine: EngineInfo | None = None,
    attested: Mapping[str, AttestedLevel] | None = None,
) -> DoctorJson:
    """`imagekit doctor --json`: the host, the engine and the verdict on each image (with
    `attested`: what each image's attestations say)."""
    return {
        "engine": engine.to_json() if engine is not None else None,
        "host": {
            "driver": host.driver,
            "source": host.source,
            "problems": list(host.problems),
            "gpus": [
                {"index": g.index, "name": g.name, "capability": g.capability} for g in host.gpus
            ],
        },
        "images": [_assessment_json(a, attested or {}) for a in assessments],
    }
