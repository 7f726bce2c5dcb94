"""Which level of verification an image reached: static, cpu or gpu. Pure.

The levels build on each other. `static`: the image is what its labels say, inspected without
running a workload (versions, for CUDA images the whole CUDA stack, structure, labels against
the compatibility data). `cpu`: static, and the workload probes passed on the CPU. `gpu`: cpu,
and the GPU probes passed on a GPU. A CUDA image verified on a machine without a GPU reaches
`cpu` at most, and its record says the `gpu` level was not run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from imagekit.kernel.records import LEVELS, Level, LevelState, ProbeResult, Reached, Status


def level_states(
    results: Sequence[ProbeResult],
    probe_levels: Mapping[str, Level],
    required: Sequence[str] | None,
    *,
    inspection_ok: bool,
    ran_on_gpu: bool,
    cuda_image: bool,
) -> dict[Level, LevelState]:
    """Each level's own state: `pass`, `fail`, `not run` or `n/a` (gpu on a CPU image).

    `required` narrows the probes that count, as in `probes.overall`; `inspection_ok` is
    whether the host-side checks (structure, labels) held; they belong to the static level.
    """
    counted = [r for r in results if required is None or r.probe in required]
    state: dict[Level, LevelState] = {}
    for level in LEVELS:
        mine = [r for r in counted if probe_levels.get(r.probe, Level.CPU) is level]
        if level is Level.GPU and not cuda_image:
            state[level] = LevelState.NOT_APPLICABLE
        elif any(r.status.bad for r in mine) or (level is Level.STATIC and not inspection_ok):
            state[level] = LevelState.FAIL
        elif any(r.status is Status.PASS for r in mine) and (level is not Level.GPU or ran_on_gpu):
            state[level] = LevelState.PASS
        else:
            state[level] = LevelState.NOT_RUN  # nothing of it ran (or a GPU probe ran off-GPU)
    return state


def reached(state: Mapping[Level, LevelState]) -> Reached:
    """The highest level passed with every level below it: `none`, `static`, `cpu` or `gpu`."""
    top: Reached = "none"
    for level in LEVELS:
        if state.get(level) is not LevelState.PASS:
            break
        top = level.value
    return top


def rank(level: str) -> int:
    """`none` 0, then each level in order; for comparing two runs."""
    order = ["none", *LEVELS]
    return order.index(level) if level in order else 0
