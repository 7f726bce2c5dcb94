"""Adapter: run the probes inside a container of an image, and take it away afterwards.

One container per image: the probes are copied in with `put_archive` (works
with a remote engine, where a bind mount would not), all probes run in one
Python process, the container is waited for with a timeout, killed when it
runs over, and always removed, Ctrl-C included. Containers carry imagekit
labels so `imagekit gc` can collect any that a killed run leaves.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
import docker.types
import requests.exceptions

from imagekit.engine import RUN_LABEL, engine_errors
from imagekit.errors import EngineUnavailableError
from imagekit.probes import runner_command

PROBE_DIR = "/tmp/imagekit-probes"
KILL_GRACE_S = 10
NO_GPU_HINT = (
    "the engine has no NVIDIA runtime (install the NVIDIA Container Toolkit), "
    "or run with --gpus none"
)


class GpuUnavailableError(EngineUnavailableError):
    """GPUs were asked for, but the engine cannot hand them to containers."""


def probes_archive(folder: Path) -> bytes:
    """A tar of the probe files, root-owned and world-readable, for `put_archive`."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("imagekit-probes")
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
        archive.addfile(info)
        for path in sorted(folder.glob("*.py")):
            data = path.read_bytes()
            item = tarfile.TarInfo(f"imagekit-probes/{path.name}")
            item.size, item.mode, item.mtime = len(data), 0o644, 0
            archive.addfile(item, io.BytesIO(data))
    return buffer.getvalue()


@dataclass
class ContainerRun:
    """What came back from one probe container."""

    stdout: str
    stderr: str
    exit_code: int | None
    timed_out: bool
    wall_s: float
    start_s: float


def run_probes(
    client: docker.DockerClient,
    image: str,
    probes_dir: Path,
    probes: list[str],
    expected: dict[str, object],
    *,
    device: str,
    gpus: bool,
    timeout_s: float,
    shm_bytes: int,
    labels: dict[str, str],
) -> ContainerRun:
    """Run `probes` in one container of `image`; the container is gone when this returns."""
    command = runner_command("python3", PROBE_DIR, probes, dict(expected), device)
    requests_ = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])] if gpus else []
    started = time.monotonic()
    container = None
    try:
        with engine_errors(f"creating a probe container of {image}"):
            try:
                container = client.containers.create(
                    image,
                    command,
                    entrypoint=[],  # full images start services by default; probes need none
                    labels={**labels, RUN_LABEL: labels.get(RUN_LABEL, "")},
                    shm_size=shm_bytes,
                    # An init as PID 1: it reaps the DDP ranks, and a probe process that is
                    # killed dies (signals to PID 1 itself would be ignored).
                    init=True,
                    network_mode="none",  # probes need no network; DDP uses loopback
                    device_requests=requests_,
                    detach=True,
                )
                container.put_archive("/tmp", probes_archive(probes_dir))
                container.start()
            except docker.errors.APIError as exc:
                text = str(exc.explanation or exc)
                if "could not select device driver" in text or "nvidia" in text.lower():
                    raise GpuUnavailableError(f"no GPUs for {image}: {text}", NO_GPU_HINT) from None
                raise
        start_s = time.monotonic() - started
        timed_out = False
        exit_code: int | None = None
        try:
            # Not under engine_errors: a read timeout here means "ran over", not "no engine".
            status = container.wait(timeout=timeout_s)
            exit_code = int(status.get("StatusCode", -1))
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            timed_out = True
            with engine_errors("stopping a probe container that ran over"):
                container.kill()
                container.wait(timeout=KILL_GRACE_S)
        with engine_errors(f"reading the probe output of {image}"):
            stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        return ContainerRun(
            stdout, stderr, exit_code, timed_out, time.monotonic() - started, start_s
        )
    finally:
        if container is not None:
            # On failure `imagekit gc` collects it by its labels.
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                container.remove(force=True, v=True)
