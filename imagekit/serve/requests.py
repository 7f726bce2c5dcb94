"""The request of `imagekit run`: one image as a workstation."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import GPUS, Arg, Flags, Opt
from imagekit.kernel.runtime import GpuChoice
from imagekit.serve.decide import Service


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


SERVICES = Flags(
    jupyter=Opt("--jupyter", help="JupyterLab (the default)."),
    ssh=Opt("--ssh", help="sshd, key only."),
    tensorboard=Opt("--tensorboard", help="TensorBoard."),
    shell=Opt("--shell", help="An interactive shell."),
)


@dataclass(frozen=True)
class RunCommand:
    """Start JupyterLab, sshd or TensorBoard in an image (or a shell / a command)."""

    image: Annotated[str, Arg(help="A full image (any image for --shell / -- CMD).")]
    command: Annotated[
        tuple[str, ...], Arg(help="After --: a command to run instead of a service.")
    ] = ()
    # on the line, one flag each (`pick_service`)
    service: Annotated[Service, SERVICES] = Service.JUPYTER
    authorized_keys: Annotated[
        Path | None,
        Opt("--authorized-keys", help="Public keys for --ssh (default: ~/.ssh/id_*.pub)."),
    ] = None
    workspace: Annotated[
        Path, Opt("--workspace", help="Folder mounted at /workspace (default: here).")
    ] = Path(".")
    gpus: Annotated[GpuChoice, GPUS] = GpuChoice.AUTO
    # (container port, host port)
    ports: Annotated[
        tuple[tuple[int, int], ...],
        Opt(
            "--port",
            help="HOST:CONTAINER port mapping (repeatable).",
            given_as=list[str] | None,
            parse=host_ports,
        ),
    ] = ()
    # docker's --user: the service runs as exactly this user
    user: Annotated[
        str | None,
        Opt(
            "--user",
            help="Run as USER[:GROUP] (docker's --user). Default: the owner of the workspace.",
            parse=docker_user,
        ),
    ] = None

    @staticmethod
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

    def __post_init__(self) -> None:
        if not self.workspace.is_dir():
            raise InputError(f"--workspace {self.workspace} is not a folder")
        # Before any engine call: Docker would bind-mount a missing file as a new folder.
        if self.authorized_keys is not None and not self.authorized_keys.is_file():
            raise InputError(
                f"--authorized-keys {self.authorized_keys} is not a file",
                "pass a public key file, such as ~/.ssh/id_ed25519.pub",
            )
