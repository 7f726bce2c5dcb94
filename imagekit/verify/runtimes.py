"""How the probes run under an HPC runtime, decided here. Pure.

`imagekit verify --runtime charliecloud` exports each image from the engine to a folder and
runs the same runner as in a container with `ch-run`, as the invoking user, with nothing the
docs do not tell a user to pass: no `--set-env`, so the image must work on the host's
environment (kernel/runtime_env.py). Apptainer and enroot have no runner here: asking for one
names what to install and how to run the image by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from imagekit.kernel.vocabulary import Runtime

# Where the probe folder is bound inside the image: /mnt is in every Debian and Ubuntu base,
# and ch-run 0.31 binds only onto a path the image has.
PROBES_AT = "/mnt"
# What each runtime's program is called, and how a user gets it.
PROGRAMS = {
    Runtime.CHARLIECLOUD: "ch-run",
    Runtime.APPTAINER: "apptainer",
    Runtime.ENROOT: "enroot",
}
INSTALL = {
    Runtime.CHARLIECLOUD: "apt-get install charliecloud (Debian 12, Ubuntu 22.04+)",
    Runtime.APPTAINER: "Apptainer from https://apptainer.org (apt-get install apptainer from its "
    "PPA on Ubuntu)",
    Runtime.ENROOT: "enroot from https://github.com/NVIDIA/enroot/releases (its .deb)",
}
# The variables of imagekit's own Python that must not reach the image's.
NOT_PASSED = ("PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONSTARTUP")


def missing_runtime(runtime: Runtime, found: bool) -> str | None:
    """Why `runtime` cannot run the probes here (`found`: whether its program is on PATH), as
    the one line the person reads; None when it can."""
    program = PROGRAMS[runtime]
    if not found:
        return (
            f"--runtime {runtime} needs {program}, which is not on PATH: install {INSTALL[runtime]}"
        )
    if runtime is not Runtime.CHARLIECLOUD:
        return (
            f"imagekit runs its probes under charliecloud and docker, not {runtime}: export the "
            f"image (imagekit export IMAGE --format squashfs) and run it as docs/how-to/hpc.md says"
        )
    return None


def ch_run_command(image_dir: Path, probes_dir: Path, command: list[str]) -> list[str]:
    """`command` under ch-run in `image_dir`, the probes bound at `PROBES_AT`, working in a
    /tmp of its own (what the probes write there leaves with them, not in the host's /tmp).
    The image's user is the invoking one, with the host's environment."""
    return [
        PROGRAMS[Runtime.CHARLIECLOUD],
        "--private-tmp",
        "--cd=/tmp",
        f"--bind={probes_dir}:{PROBES_AT}",
        str(image_dir),
        "--",
        *command,
    ]


def runtime_environment(host: Mapping[str, str], user: str) -> dict[str, str]:
    """The environment a runtime's process gets: the person's own, less what belongs to
    imagekit's Python (a PYTHONPATH of the host breaks the image's), with USER set (`user`:
    who runs; ch-run refuses to start without it, and `su` or cron may leave it unset)."""
    kept = {name: value for name, value in host.items() if name not in NOT_PASSED}
    return {"USER": user, **kept}


def as_root_refusal(runtime: Runtime) -> str:
    """Why root may not verify under `runtime`: the image runs as whoever starts it, and the
    probes would prove it as root, which no cluster user is (the env probe fails `runs as a
    non-root user`)."""
    return (
        f"--runtime {runtime} runs the image as you, and you are root: verify as the non-root "
        "account that will run it (su - USER -c 'imagekit verify ...')"
    )


def runtime_problem(
    runtime: Runtime, slurm: bool, nodes: int, slurm_options: Sequence[str]
) -> tuple[str, str] | None:
    """What is wrong with how verify's options combine the runtime, Slurm and nodes, and its
    remedy: Slurm's options (`slurm_options`: the names of those given) go with --slurm,
    --slurm with an HPC runtime, and --nodes needs the engine's containers or Slurm's nodes."""
    if slurm_options and not slurm:
        return f"{', '.join(slurm_options)} go with --slurm", "add --slurm, or leave them out"
    if slurm and not runtime.exported:
        return (
            "--slurm runs the probes under an HPC runtime, not the engine's containers",
            "add --runtime charliecloud",
        )
    if runtime.exported and nodes > 1 and not slurm:
        return (
            f"--nodes {nodes} runs in the engine's containers or on Slurm's nodes, not "
            f"under --runtime {runtime} on this machine",
            "add --slurm, or verify the nodes with --runtime docker",
        )
    return None
