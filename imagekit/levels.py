"""Which rung of verification an image reached: static, cpu or gpu. Pure.

The rungs build on each other. `static`: the image is what its labels say, inspected without
running a workload (versions, for CUDA images the whole CUDA stack, structure, labels against
the compatibility data). `cpu`: static, and the workload probes passed on the CPU. `gpu`: cpu,
and the GPU probes passed on a GPU. A CUDA image verified on a machine without a GPU reaches
`cpu` at most, and its record says the `gpu` rung was not run.
"""

from __future__ import annotations

from typing import Any

from imagekit.probes import LEVELS

BAD = ("fail", "error", "timeout")


def rungs(
    results: list[dict[str, Any]],
    probe_levels: dict[str, str],
    required: list[str] | None,
    *,
    inspection_ok: bool,
    ran_on_gpu: bool,
    cuda_image: bool,
) -> dict[str, str]:
    """Each rung's own state: `pass`, `fail`, `not run` or `n/a` (gpu on a CPU image).

    `required` narrows the probes that count, as in `probes.overall`; `inspection_ok` is
    whether the host-side checks (structure, labels) held; they belong to the static rung.
    """
    counted = [r for r in results if required is None or r["probe"] in required]
    state: dict[str, str] = {}
    for level in LEVELS:
        mine = [r for r in counted if probe_levels.get(r["probe"], "cpu") == level]
        if level == "gpu" and not cuda_image:
            state[level] = "n/a"
            continue
        if any(r["status"] in BAD for r in mine) or (level == "static" and not inspection_ok):
            state[level] = "fail"
        elif any(r["status"] == "pass" for r in mine) and (level != "gpu" or ran_on_gpu):
            state[level] = "pass"
        else:
            state[level] = "not run"  # nothing of this rung ran (or a GPU probe ran off-GPU)
    return state


def highest(state: dict[str, str]) -> str:
    """The highest rung passed with every rung below it: `none`, `static`, `cpu` or `gpu`."""
    reached = "none"
    for level in LEVELS:
        if state.get(level) != "pass":
            break
        reached = level
    return reached
