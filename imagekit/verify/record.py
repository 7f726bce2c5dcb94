"""One image's verify record, built once, when everything it holds is known. Pure.

`verify/run.py` hands over what the image's plan was (`TargetPlan`), what its probes reported
(`ProbeRun`) and what was seen of it from outside (`Inspection`); the verdict, the levels and the
probes that must pass are decided here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from imagekit.kernel.engine import LocalImage
from imagekit.kernel.records import (
    LEVELS,
    Check,
    Level,
    LevelState,
    ProbeResult,
    Timings,
    Verdict,
    VerifyRecord,
)
from imagekit.matrix.compat import CompatData
from imagekit.verify.agreement import Identity, compare, label_checks
from imagekit.verify.levels import level_states, reached
from imagekit.verify.plan import TargetPlan
from imagekit.verify.ports import ProbeRun
from imagekit.verify.probes import ProbeSpec, overall


@dataclass(frozen=True)
class Inspection:
    """What was seen of an image beside its probes' results."""

    # The structure checks, then the labels against what the env probe saw inside.
    structure: tuple[Check, ...]
    agreement: tuple[Check, ...]  # the labels against the compatibility data

    @property
    def ok(self) -> bool:
        """Whether every check held (a failed one fails the image, whatever its probes say)."""
        return all(c.ok for c in (*self.structure, *self.agreement))


def inspection_of(
    image: LocalImage,
    structure: Sequence[Check],
    results: Sequence[ProbeResult],
    compat: CompatData,
) -> Inspection:
    """The inspection of `image`: its `structure` checks (the inspector's) with its labels
    against what the env probe among `results` saw (an imagekit image's), and its labels
    against the compatibility data."""
    seen = list(structure)
    env = next((r for r in results if r.probe == "env"), None)
    if env is not None and image.imagekit.is_imagekit:
        seen += compare(Identity.from_labels(image.imagekit), env.facts, "label")
    agreement = label_checks(dict(image.labels), dict(image.env), compat, image.platform)
    return Inspection(tuple(seen), tuple(agreement))


def required_probes(
    planned: Sequence[str], results: Sequence[ProbeResult], specs: Mapping[str, ProbeSpec]
) -> tuple[str, ...]:
    """The probes that must pass: those `planned` (`TargetPlan.required`), else (an image from
    before the label, or not imagekit's) every probe that ran."""
    required = list(planned) or [r.probe for r in results]
    # A multi-node probe runs only when --nodes asks for it: then it counts, always.
    across = [r.probe for r in results if r.probe in specs and specs[r.probe].nodes > 1]
    return (*required, *(p for p in across if p not in required))


def required_levels(
    states: Mapping[Level, LevelState],
    required: Sequence[str],
    specs: Mapping[str, ProbeSpec],
) -> tuple[Level, ...]:
    """The levels a required probe stands for. A level that does not apply to the image (gpu
    on a CPU image) is never required."""
    return tuple(
        level
        for level in LEVELS
        if states[level] is not LevelState.NOT_APPLICABLE
        and any(specs[p].level is level for p in required if p in specs)
    )


def record_of(
    planned: TargetPlan,
    outcome: ProbeRun,
    inspection: Inspection,
    specs: Mapping[str, ProbeSpec],
    verify_wall_s: float,
) -> VerifyRecord:
    """The record of one image verified as `planned` (the plan that ran: on the CPU after a
    GPU fallback), which took `verify_wall_s` from its start until now."""
    image, emulation = planned.image, planned.emulation
    results = outcome.output.results
    required = required_probes(planned.required, results, specs)
    status = overall(results, required) if inspection.ok else Verdict.FAIL
    states = level_states(
        results,
        {name: spec.level for name, spec in specs.items()},
        required,
        inspection_ok=inspection.ok,
        ran_on_gpu=outcome.output.device.startswith("cuda"),
        cuda_image=image.imagekit.cuda is not None,
    )
    return VerifyRecord(
        image_id=image.id,
        reference=planned.target.reference,
        labels=dict(image.labels),
        size_bytes=image.size_bytes,
        platform=image.platform,
        runtime=planned.runtime,
        emulated=emulation.emulated,
        emulated_cpu=emulation.cpu,
        device=outcome.output.device,
        device_reason=outcome.output.device_reason,
        level=reached(states),
        levels=states,
        status=status,
        required_probes=required,
        required_levels=required_levels(states, required, specs),
        probes=results,
        structure=inspection.structure,
        labels_agree=inspection.agreement,
        timings=Timings(
            container_start_s=round(outcome.start_s, 3),
            probe_wall_s=round(outcome.wall_s, 3),
            verify_wall_s=round(verify_wall_s, 3),
            timeout_s=planned.request.timeout_s,
            timed_out=outcome.timed_out,
        ),
    )
