"""The publish gate (pure): may this exact image be pushed under these tags?

Only results recorded for the same image id count, and only records whose integrity seal
holds (`kernel/integrity.py`: a record edited after verify wrote it is refused); every required
probe must have passed there; and the versions a tag names must equal the versions the
probes saw inside the image; with a matrix `security:` section, the image's audit must pass
(no pending fix or finding at the threshold that the allowlist does not accept). `--force`
overrides the gate and is recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from imagekit.audit.report import failure_lines
from imagekit.kernel.publish_records import Evidence
from imagekit.kernel.records import AuditRecord, LevelState, Status, Verdict, VerifyRecord
from imagekit.matrix.plan import ImagePlan, tag_problem
from imagekit.verify.agreement import Identity, disagreements


@dataclass(frozen=True)
class GateEvidence:
    """What a decision rested on: the image, the verify run that let it through, and what
    `--force` overrode."""

    image_id: str = ""
    forced: bool = False
    verify_run: str | None = None
    overridden: tuple[str, ...] = ()


@dataclass(frozen=True)
class GateDecision:
    """Whether an image may be published, and every reason it may not."""

    allowed: bool
    reasons: tuple[str, ...] = ()
    evidence: GateEvidence = GateEvidence()
    passing: Evidence | None = None  # the record that let the image through (attested)


class Problem(Enum):
    """The kinds of reason the gate refuses for; each has one thing to do about it."""

    NO_RECORD = "verify this very image first (imagekit verify, with this --matrix and --only)"
    NOT_RUN = "verify again with the required probes (without --probes, or naming them all)"
    FAILED = "fix what the failing probes report (their logs are in the verify run's logs/)"
    INSPECTION = "fix the structure or label problem named, rebuild, and verify again"
    LEVEL = "verify where the level can be reached (the gpu level: on a GPU machine)"
    INTEGRITY = "verify again: a record changed after verify wrote it is never trusted"
    TAG = "fix the matrix entry (its versions) or the image, rebuild, and verify again"
    SECURITY = (
        "bootstrap the base again (it takes the security suite's fixes), rebuild on it and "
        "verify; accept a finding with no fix yet in security.allowlist, with its reason"
    )


def remedy(kinds: Sequence[Problem]) -> str:
    """One line saying what to do about the problems of `kinds`, in the order they came."""
    todo = list(dict.fromkeys(kinds))
    return "to publish it: " + "; then ".join(k.value for k in todo) if todo else ""


def _problems(record: VerifyRecord, required: Sequence[str]) -> list[tuple[Problem, str]]:
    """Why this one verify record does not let the image through (empty: it does).

    Fail closed: the record's own verdict, every level a required probe belongs to, every
    required probe, and every host-side check must have passed; any one of them refuses. A
    level that does not apply to the image (`n/a`: gpu on a CPU image) is never required.
    """
    missing = [p for p in required if record.result(p) is None]
    parts = [(Problem.NOT_RUN, f"not run: {', '.join(missing)}")] if missing else []
    parts += [
        (Problem.FAILED, f"{p} {result.status}")
        for p in required
        if (result := record.result(p)) is not None and result.status is not Status.PASS
    ]
    parts += [(Problem.INSPECTION, f"structure: {c.name}") for c in record.structure if not c.ok]
    parts += [(Problem.INSPECTION, f"labels: {c.name}") for c in record.labels_agree if not c.ok]
    parts += [
        (Problem.LEVEL, f"level {level} {state}")
        for level, state in record.levels.items()
        if state is LevelState.FAIL
        or (
            level in record.required_levels
            and state not in (LevelState.PASS, LevelState.NOT_APPLICABLE)
        )
    ]
    if record.status is not Verdict.PASS and not parts:
        parts.append((Problem.FAILED, "verify recorded this image as failed"))
    return parts


def _passing_run(
    mine: Sequence[Evidence], required: Sequence[str]
) -> tuple[Evidence | None, list[str], list[Problem]]:
    """The newest verify record where every required probe passed, why others did not, and
    the kinds of those reasons."""
    why: list[str] = []
    kinds: list[Problem] = []
    for item in mine:
        parts = _problems(item.record, required)
        if item.seal_problem:
            parts.append((Problem.INTEGRITY, f"integrity: {item.seal_problem}"))
        if not parts:
            return item, why, kinds
        why.append(f"run {item.run_id}: " + "; ".join(text for _, text in parts))
        kinds += [kind for kind, _ in parts]
    return None, why, kinds


def decide(
    plan: ImagePlan,
    image_id: str,
    records: Sequence[Evidence],
    *,
    force: bool = False,
    also_named: Sequence[str] = (),
    audit: AuditRecord | None = None,
) -> GateDecision:
    """May `image_id` be published as `plan`? `records` are verify records of any images,
    newest first. `also_named`: other digests of the same image (a registry's manifest and
    index digests beside its config digest), for records made on an engine that names images
    by those (the containerd store). `audit`: the image's audit, run for the gate (a matrix
    with a `security:` section); one that failed refuses, naming each finding."""
    for tag in (plan.tag, *plan.aliases):
        if (problem := tag_problem(tag)) is not None:
            return GateDecision(False, (problem,))  # never overridable: the push would fail
    names = {image_id, *also_named} - {""}
    mine = [r for r in records if r.record.image_id in names]
    others = len(records) - len(mine)
    reasons: list[str] = []
    kinds: list[Problem] = []
    verify_run: str | None = None
    passing: Evidence | None = None
    if not mine:
        reasons.append(
            f"no verify results for image {image_id[:19]}"
            + (f" ({others} results belong to other image ids)" if others else "")
        )
        kinds.append(Problem.NO_RECORD)
    else:
        passing, why, kinds = _passing_run(mine, plan.required_probes)
        if passing is None:
            reasons += why or ["no passing verify run"]
        else:
            verify_run = passing.run_id
            env = passing.record.result("env")
            if env is None:
                reasons.append("no env probe result to check the tag against")
                kinds.append(Problem.NOT_RUN)
            else:
                wrong = disagreements(Identity.from_cell(plan.cell), env.facts, "tag")
                reasons += wrong
                kinds += [Problem.TAG] * len(wrong)
    if audit is not None and audit.status is Verdict.FAIL:
        found = failure_lines(audit)
        reasons.append(f"security: {len(found)} findings at {audit.threshold}: " + "; ".join(found))
        kinds.append(Problem.SECURITY)
    if reasons and force:
        overridden = GateEvidence(image_id, force, verify_run, tuple(reasons))
        return GateDecision(True, tuple(reasons), overridden, None)
    if reasons:  # the last reason says what to do about the others
        reasons.append(remedy(kinds or [Problem.NO_RECORD]))
    return GateDecision(
        not reasons, tuple(reasons), GateEvidence(image_id, force, verify_run), passing
    )
