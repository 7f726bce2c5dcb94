"""Adapter: the probes under Charliecloud's `ch-run`, as the invoking user, on the image
exported from the engine (`imagekit export`'s folder), with nothing a user would not pass
(verify/runtimes.py decides the command line).

Each image is exported into a private scratch folder, run, and removed with everything in it,
however the run ends: ch-run keeps no state of its own, and its processes are one process
group, killed together when they run over or the verify is interrupted.
"""

from __future__ import annotations

import getpass
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.export import export_image, remove
from imagekit.adapters.hostprobe import run_bounded
from imagekit.adapters.probe_folder import NONCE_NAME, probe_folder
from imagekit.errors import EngineUnavailableError, GpuUnavailableError, InputError
from imagekit.hpc.export import ExportFormat
from imagekit.kernel.vocabulary import Runtime
from imagekit.verify.ports import NodesRequest, NodesRun, ProbeRequest, ProbeRun
from imagekit.verify.probes import runner_command
from imagekit.verify.runtimes import (
    PROBES_AT,
    PROGRAMS,
    as_root_refusal,
    ch_run_command,
    missing_runtime,
    runtime_environment,
)

NVIDIA_LISTER = "nvidia-container-cli"


def require_runtime(runtime: Runtime, *, slurm: bool = False) -> None:
    """Refuse, before any engine call, an HPC runtime that cannot run here: its program is not
    installed (exit 3, naming what to install), imagekit has no runner for it (exit 2), or
    root would run the image as root (exit 2); with `slurm`, Slurm's commands too (exit 3).
    On a cluster, ch-run is on the compute nodes: the login node may lack it, so it is not
    asked for there."""
    if slurm:
        from imagekit.adapters.slurm import require_slurm

        require_slurm()
    if not runtime.exported:
        return
    found = slurm or shutil.which(PROGRAMS[runtime]) is not None
    if (why := missing_runtime(runtime, found)) is not None:
        if found:
            raise InputError(why)
        raise EngineUnavailableError(why)
    if os.geteuid() == 0:
        raise InputError(as_root_refusal(runtime))


class CharliecloudRunner:
    """The `ProbeRunner` port under ch-run: `scratch` holds each image's export while it runs
    (default: the system's temporary folder)."""

    def __init__(self, engine: DockerEngine, scratch: Path | None = None) -> None:
        self.engine = engine
        self.scratch = scratch

    def run(self, request: ProbeRequest) -> ProbeRun:
        """Export the image, then run the request's probes in it under ch-run; `shm_bytes`,
        `memory_bytes` and `labels` belong to containers (the host's /dev/shm and limits
        apply)."""
        nonce = secrets.token_hex(16)
        folder = Path(tempfile.mkdtemp(prefix="imagekit-ch-", dir=self.scratch))
        try:
            started = time.monotonic()
            if request.gpus:
                require_nvidia_lister()  # before minutes of export
            image_dir = folder / "image"
            export_image(self.engine, request.image, image_dir, ExportFormat.DIR)
            if request.gpus:
                inject_nvidia(image_dir)
            probes = probe_folder(folder / "probes", request.probes_dir, nonce)
            start_s = time.monotonic() - started
            command = runner_command(
                "python3",  # the host's PATH finds the image's: what a user's command gets
                PROBES_AT,
                list(request.probes),
                request.expected,
                request.device,
                f"{PROBES_AT}/{NONCE_NAME}",
            )
            env = runtime_environment(os.environ, getpass.getuser()) | dict(request.environment)
            ran = time.monotonic()
            stdout, stderr, code, timed_out = run_bounded(
                ch_run_command(image_dir, probes, command), request.timeout_s, env
            )
            wall_s = time.monotonic() - ran
        finally:
            remove(folder)
        return ProbeRun.of(
            request,
            stdout,
            stderr,
            exit_code=code,
            timed_out=timed_out,
            nonce=nonce,
            wall_s=wall_s,
            start_s=start_s,
        )

    def run_nodes(self, request: NodesRequest) -> NodesRun:
        """Multi-node runs are the engine's (VerifySettings refuses --nodes here)."""
        raise InputError("--nodes runs in the engine's containers, not under ch-run")


def require_nvidia_lister() -> None:
    """GpuUnavailableError where `ch-fromhost --nvidia` cannot learn the driver's files."""
    if shutil.which(NVIDIA_LISTER) is None:
        raise GpuUnavailableError(
            f"--gpus all under charliecloud: {NVIDIA_LISTER} is not on PATH, so ch-fromhost "
            "cannot find the host's NVIDIA driver",
            "install libnvidia-container-tools (NVIDIA's repository), or run with --gpus none",
        )


def inject_nvidia(image_dir: Path) -> None:
    """The host's NVIDIA driver files in the exported image, as NVIDIA's tools list them
    (`ch-fromhost --nvidia`, which asks nvidia-container-cli); GpuUnavailableError when there
    is nothing to inject."""
    require_nvidia_lister()
    done = subprocess.run(
        ["ch-fromhost", "--nvidia", str(image_dir)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise GpuUnavailableError(
            f"--gpus all under charliecloud: ch-fromhost --nvidia failed: {said}",
            "check the host's driver (nvidia-smi), or run with --gpus none",
        )
