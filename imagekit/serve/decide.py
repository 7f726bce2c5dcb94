"""What `imagekit run` starts, and what it may do on an engine: decided from its options, the
engine's facts and the workspace's owner alone. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

from imagekit.errors import GpuUnavailableError, InputError
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.runtime import GpuChoice, silent_gpu_drop, use_gpus


class Service(StrEnum):
    """What `imagekit run` starts in a container."""

    JUPYTER = "jupyter"
    SSH = "ssh"
    TENSORBOARD = "tensorboard"
    SHELL = "shell"  # an interactive shell
    COMMAND = "command"  # the command given after --


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


def command_user(
    given: str | None,
    *,
    entrypoint: bool,
    rootless: bool,
    me: tuple[int, int],
    owner: tuple[int, int],
) -> str | None:
    """docker's `--user` for a shell or a command of `imagekit run` (None: the image decides),
    so that what it writes into the workspace belongs to whoever the folder belongs to.

    `given` (`--user`) is used exactly as given. An image with imagekit's entrypoint (full)
    decides by itself, as under plain `docker run`: the folder's owner, root where only root can
    write it. Otherwise (slim): on a rootless engine the container's root, which is the person
    (`me`) running it; for root, the folder's `owner` (root's own: root); else the person."""
    if given is not None:
        return given
    if entrypoint:
        return None
    if rootless:
        return "0:0"
    uid, gid = owner if me[0] == 0 else me
    return f"{uid}:{gid}"


def docker_user(value: str | None) -> str | None:
    """`--user` as docker takes it: NAME or UID, with an optional :GROUP or :GID."""
    if value is None:
        return None
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?", value):
        raise InputError(
            f"--user {value!r} is not USER[:GROUP]", "e.g. --user 1000:1000 or --user ml"
        )
    return value


def host_ports(items: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """`HOST:CONTAINER` items as (container, host) pairs."""
    found = []
    for item in items:
        host, sep, inside = item.partition(":")
        if not sep or not host.isdigit() or not inside.isdigit():
            raise InputError(f"--port {item!r} is not HOST:CONTAINER", "e.g. --port 18888:8888")
        found.append((int(inside), int(host)))
    return tuple(found)


def pick_service(flags: Mapping[str, bool], command: tuple[str, ...]) -> Service:
    """The one service the flags name (default jupyter), or `command` after `--`."""
    chosen = [name for name, on in flags.items() if on]
    if chosen and command[:1] in (("true",), ("false",), ("yes",), ("no",)):
        raise InputError(
            f"--{chosen[0]} takes no value ({command[0]!r} was read as a command to run)",
            f"drop {command[0]!r}: imagekit run IMAGE --{chosen[0]}",
        )
    if len(chosen) > 1 or (chosen and command):
        raise InputError("pick one of --jupyter, --ssh, --tensorboard, --shell or -- CMD")
    if chosen:
        return Service(chosen[0])
    return Service.COMMAND if command else Service.JUPYTER
