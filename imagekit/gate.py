"""The publish gate (pure): may this exact image be pushed under these tags?

Only results recorded for the same image id count; every required probe must
have passed there; and the versions a tag names must equal the versions the
probes saw inside the image. `--force` overrides the gate and is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from imagekit.plan import ImagePlan, tag_problem


@dataclass(frozen=True)
class GateDecision:
    """Whether an image may be published, and every reason it may not."""

    allowed: bool
    reasons: tuple[str, ...] = ()
    evidence: dict[str, Any] = field(default_factory=dict)


def _passing_run(
    records: list[dict[str, Any]], required: list[str]
) -> tuple[dict[str, Any] | None, list[str]]:
    """The newest verify record where every required probe passed, and why others did not."""
    why: list[str] = []
    for record in records:
        verify = record.get("verify") or {}
        by_probe = {r["probe"]: r for r in verify.get("probes", [])}
        missing = [p for p in required if p not in by_probe]
        failed = [
            f"{p} {by_probe[p]['status']}"
            for p in required
            if p in by_probe and by_probe[p]["status"] != "pass"
        ]
        structure = [c["name"] for c in verify.get("structure", []) if not c["ok"]]
        if not missing and not failed and not structure:
            return record, why
        run = record.get("_run", "?")
        parts = ([f"not run: {', '.join(missing)}"] if missing else []) + failed
        parts += [f"structure: {s}" for s in structure]
        why.append(f"run {run}: " + "; ".join(parts))
    return None, why


def tag_facts_problems(plan: ImagePlan, facts: dict[str, Any]) -> list[str]:
    """Every way the versions in the tag differ from what the env probe saw in the image."""
    cell = plan.cell
    problems = []
    seen_torch = str(facts.get("torch", "")).split("+")[0]
    if seen_torch != cell.torch:
        problems.append(f"tag says torch {cell.torch}, the image has {seen_torch or 'none'}")
    if facts.get("cuda") != cell.cuda:
        problems.append(
            f"tag says CUDA {cell.cuda or 'none'}, the image has {facts.get('cuda') or 'none'}"
        )
    if cell.cudnn_major is not None:
        seen = str(facts.get("cudnn") or "").split(".")[0]
        if seen != cell.cudnn_major:
            problems.append(
                f"tag says cuDNN {cell.cudnn_major}, the image has {facts.get('cudnn') or 'none'}"
            )
    seen_python = ".".join(str(facts.get("python", "")).split(".")[:2])
    if seen_python != cell.python:
        problems.append(f"tag says Python {cell.python}, the image has {seen_python or 'none'}")
    return problems


def decide(
    plan: ImagePlan,
    image_id: str,
    records: list[dict[str, Any]],
    *,
    force: bool = False,
) -> GateDecision:
    """May `image_id` be published as `plan`? `records` are verify records of any images."""
    for tag in (plan.tag, *plan.aliases):
        if (problem := tag_problem(tag)) is not None:
            return GateDecision(False, (problem,))  # never overridable: the push would fail
    mine = [r for r in records if (r.get("verify") or {}).get("image_id") == image_id]
    others = len(records) - len(mine)
    reasons: list[str] = []
    evidence: dict[str, Any] = {"image_id": image_id, "forced": force}
    required = list(plan.required_probes)
    if not mine:
        reasons.append(
            f"no verify results for image {image_id[:19]}"
            + (f" ({others} results belong to other image ids)" if others else "")
        )
    else:
        record, why = _passing_run(mine, required)
        if record is None:
            reasons += why or ["no passing verify run"]
        else:
            evidence["verify_run"] = record.get("_run")
            env = next((r for r in record["verify"]["probes"] if r["probe"] == "env"), None)
            if env is None:
                reasons.append("no env probe result to check the tag against")
            else:
                reasons += tag_facts_problems(plan, env["facts"])
    if reasons and force:
        evidence["overridden"] = list(reasons)
        return GateDecision(True, tuple(reasons), evidence)
    return GateDecision(not reasons, tuple(reasons), evidence)
