"""How imagekit makes a probe container, for one image or for the nodes of a multi-node run:
the probe files it is given (`put_archive`: works with a remote engine, where a bind mount
would not), the user it runs as, and how it is fenced in (`hardening`): a probe is code run
inside an image under test.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from pathlib import Path
from typing import TypedDict

import docker
import docker.errors
import docker.types
from docker.models.containers import Container

from imagekit.adapters.engine import DockerEngine, engine_errors
from imagekit.errors import GpuUnavailableError
from imagekit.kernel import labels as L
from imagekit.verify.ports import ProbeRequest

# The probes live in a volume of their own (put_archive can write there although the root
# filesystem is read-only); the volume goes with the container. Their folder is made by the
# archive, writable to the image's user, who must be able to remove the nonce file.
VOLUME = "/imagekit"
PROBE_DIR = f"{VOLUME}/probes"
NONCE_FILE = f"{PROBE_DIR}/.nonce"
KILL_GRACE_S = 10
# Scratch space for probes (compiler output, DDP's rendezvous files), in memory.
TMP_BYTES = 1 << 30
# Threads count as pids: torch starts a pool per core in each DDP rank.
PIDS_LIMIT = 4096
NO_GPU_HINT = (
    "the engine has no NVIDIA runtime (install the NVIDIA Container Toolkit), "
    "or run with --gpus none"
)


def probes_archive(folder: Path, nonce: str = "") -> bytes:
    """A tar of the probe files (root-owned, world-readable) and the run's nonce file (which
    the runner, running as the image's user, reads and removes), for `put_archive`."""
    buffer = io.BytesIO()
    files = [(p.name, p.read_bytes(), 0o644) for p in sorted(folder.glob("*.py"))]
    if nonce:
        files.append((NONCE_FILE.rsplit("/", 1)[1], nonce.encode(), 0o666))
    folder_name = PROBE_DIR.rsplit("/", 1)[1]
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo(folder_name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o777, 0
        archive.addfile(info)
        for name, data, mode in files:
            item = tarfile.TarInfo(f"{folder_name}/{name}")
            item.size, item.mode, item.mtime = len(data), mode, 0
            archive.addfile(item, io.BytesIO(data))
    return buffer.getvalue()


def image_user(engine: DockerEngine, image: str) -> str:
    """The user probe containers of `image` run as (see `labels.workload_user`)."""
    with engine_errors(f"inspecting {image}"):
        attrs = engine.client.images.get(image).attrs
    config = attrs.get("Config") or {}
    return L.workload_user(config.get("User") or "", config.get("Labels") or {})


class Hardening(TypedDict):
    """The keyword arguments of a probe container's creation that fence it in (docker-py's)."""

    cap_drop: list[str]
    security_opt: list[str]
    read_only: bool
    tmpfs: dict[str, str]
    pids_limit: int
    mem_limit: int
    nano_cpus: int
    mounts: list[docker.types.Mount]


def cpu_limit(cpus: int | None) -> int:
    """The CPUs a probe container may use, as docker's NanoCpus: all of the engine's but one
    where it has more than two, so a probe that runs away cannot starve the engine, sshd or
    the verify itself; all of them on one or two (one of two would halve the DDP probes' pace,
    which they are timed by). An engine that does not say how many: one."""
    usable = cpus - 1 if cpus is not None and cpus > 2 else (cpus or 1)
    return usable * 1_000_000_000


def hardening(request: ProbeRequest, cpus: int | None) -> Hardening:
    """How a probe container is fenced in: no capabilities, no privilege gain, a read-only
    root filesystem with in-memory scratch space, and limits on processes, memory and CPUs
    (`cpu_limit` of the engine's `cpus`).

    No capability is added back: the probes compute, read files and talk over loopback, none
    of which needs one. The memory limit is what the probes declare they need, plus the
    shared memory and scratch space, which are memory too.
    """
    return {
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "read_only": True,
        # exec: Docker mounts a tmpfs noexec by default, and what torch.compile, Triton and
        # cpp_extension build in /tmp is a shared object they then load ("failed to map
        # segment from shared object"). nosuid and nodev stay.
        "tmpfs": {"/tmp": f"rw,exec,nosuid,nodev,size={TMP_BYTES}"},
        "pids_limit": PIDS_LIMIT,
        "mem_limit": request.memory_bytes + request.shm_bytes + TMP_BYTES,
        "nano_cpus": cpu_limit(cpus),
        "mounts": [docker.types.Mount(target=VOLUME, source=None, type="volume")],
    }


def no_gpus(image: str, exc: docker.errors.APIError) -> Exception:
    """GpuUnavailableError when the engine could not hand over GPUs; else the error itself."""
    text = str(exc.explanation or exc)
    if "could not select device driver" in text or "nvidia" in text.lower():
        return GpuUnavailableError(f"no GPUs for {image}: {text}", NO_GPU_HINT)
    return exc


def stop_ran_over(container: Container, what: str) -> None:
    """Kill a probe container that ran over its time (`what`: which one, for the message), and
    wait for it to end."""
    with engine_errors(f"stopping {what}, which ran over"):
        # It may have ended on its own in the meantime: then there is nothing to kill (the
        # engine answers 409), and it still ran over its time.
        with contextlib.suppress(docker.errors.APIError):
            container.kill()
        container.wait(timeout=KILL_GRACE_S)
