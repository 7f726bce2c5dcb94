"""What `imagekit run` may do on an engine, decided from the engine's facts alone. Pure."""

from __future__ import annotations

from pathlib import Path

from imagekit.errors import GpuUnavailableError, InputError
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.runtime import GpuChoice, Service, silent_gpu_drop, use_gpus

# Services the docker CLI runs, owning the terminal.
INTERACTIVE = (Service.SHELL, Service.COMMAND)


def run_gpus(image: str, workspace: Path, gpus: GpuChoice, info: EngineInfo) -> bool:
    """Whether the container gets GPUs; refuses an engine on another machine (the workspace
    is this machine's folder) and `--gpus all` where the engine would drop them silently."""
    if info.remote:
        raise InputError(
            f"imagekit run mounts {workspace} of this machine, and the engine at "
            f"{info.endpoint} is another machine",
            "run imagekit on the engine's machine (or use `docker run` there with its own "
            "folder); build, verify and publish work against a remote engine",
        )
    if silent_gpu_drop(gpus, info.name, info.gpu_mechanism):
        raise GpuUnavailableError(
            f"--gpus all: {info.describe()} would start {image} without GPUs",
            "run with --gpus none here, or use an engine that passes GPUs",
        )
    return use_gpus(gpus, info.gpu_runtime)
