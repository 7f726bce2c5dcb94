"""The request of `imagekit run`: one image as a workstation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import GPUS, Arg, Flags, Opt
from imagekit.kernel.runtime import GpuChoice
from imagekit.serve.decide import Service, docker_user, host_ports

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

    def __post_init__(self) -> None:
        if not self.workspace.is_dir():
            raise InputError(f"--workspace {self.workspace} is not a folder")
        # Before any engine call: Docker would bind-mount a missing file as a new folder.
        if self.authorized_keys is not None and not self.authorized_keys.is_file():
            raise InputError(
                f"--authorized-keys {self.authorized_keys} is not a file",
                "pass a public key file, such as ~/.ssh/id_ed25519.pub",
            )
