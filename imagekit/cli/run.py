"""The run command: a full image's services, started the right way."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from imagekit.cli.common import (
    GpusChoice,
    app,
    guard,
    say,
)
from imagekit.errors import (
    InputError,
)

# run -------------------------------------------------------------------------


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
    image: Annotated[str, typer.Argument(help="A full image (any image for --shell / -- CMD).")],
    command: Annotated[
        list[str] | None, typer.Argument(help="After --: a command to run instead of a service.")
    ] = None,
    jupyter: Annotated[bool, typer.Option("--jupyter", help="JupyterLab (the default).")] = False,
    ssh: Annotated[bool, typer.Option("--ssh", help="sshd, key only.")] = False,
    tensorboard: Annotated[bool, typer.Option("--tensorboard", help="TensorBoard.")] = False,
    shell: Annotated[bool, typer.Option("--shell", help="An interactive shell.")] = False,
    authorized_keys: Annotated[
        Path | None, typer.Option(help="Public keys for --ssh (default: ~/.ssh/id_*.pub).")
    ] = None,
    workspace: Annotated[
        Path, typer.Option(help="Folder mounted at /workspace (default: here).")
    ] = Path("."),
    gpus: Annotated[GpusChoice, typer.Option(help="auto: GPUs when the engine has them.")] = (
        GpusChoice.auto
    ),
    port: Annotated[
        list[str] | None, typer.Option(help="HOST:CONTAINER port mapping (repeatable).")
    ] = None,
) -> None:
    """Start JupyterLab, sshd or TensorBoard in an image (or a shell / a command)."""
    from imagekit import workstation
    from imagekit.engine import connect, engine_info

    with guard():
        chosen = [
            n
            for n, on in (
                ("jupyter", jupyter),
                ("ssh", ssh),
                ("tensorboard", tensorboard),
                ("shell", shell),
            )
            if on
        ]
        if len(chosen) > 1 or (chosen and command):
            raise InputError("pick one of --jupyter, --ssh, --tensorboard, --shell or -- CMD")
        service = chosen[0] if chosen else ("command" if command else "jupyter")
        if not workspace.is_dir():
            raise InputError(f"--workspace {workspace} is not a folder")
        ports = {}
        for item in port or ():
            host, sep, inside = item.partition(":")
            if not sep or not host.isdigit() or not inside.isdigit():
                raise InputError(f"--port {item!r} is not HOST:CONTAINER", "e.g. --port 18888:8888")
            ports[int(inside)] = int(host)
        client = connect()
        use_gpus = gpus is GpusChoice.all or (
            gpus is GpusChoice.auto and any("nvidia" in r for r in engine_info(client)["runtimes"])
        )
        if service in ("shell", "command"):
            _exec_docker_run(
                image, ["shell"] if service == "shell" else list(command or []), workspace, use_gpus
            )
        keys = authorized_keys or (workstation.default_public_key() if service == "ssh" else None)
        request = workstation.RunRequest(
            image=image,
            service=service,
            workspace=workspace,
            gpus=use_gpus,
            host_ports=ports,
            user=workstation.host_user(),
            authorized_keys=keys,
        )
        container = workstation.start(client, request)
        try:
            say(f"started {container.short_id} ({service}); waiting for it to answer ...")
            workstation.wait_ready(container, request)
            output = container.exec_run(["id", "-un"]).output
            name = output.decode().strip() if isinstance(output, bytes) else ""
            typer.echo(workstation.how_to_reach(request, name or "user"))
            say("Ctrl-C stops and removes the container")
            for chunk in container.logs(stream=True, follow=True, since=int(time.time())):
                sys.stderr.write(chunk.decode("utf-8", "replace"))
            container.reload()
            raise InputError(f"the container stopped (exit {container.attrs['State']['ExitCode']})")
        finally:
            workstation.remove(container)


def _exec_docker_run(image: str, args: list[str], workspace: Path, gpus: bool) -> None:
    """Interactive runs belong to the docker CLI, which owns the terminal; replace this process."""
    import shutil

    from imagekit.workstation import SHM_BYTES, host_user

    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise InputError("--shell and -- CMD need the docker CLI on PATH")
    argv = [
        docker_cli,
        "run",
        "--rm",
        "-i",
        "--shm-size",
        str(SHM_BYTES),
        "-v",
        f"{workspace.resolve()}:/workspace",
        "--label",
        "io.imagekit.run-id=run-cli",
    ]
    if sys.stdin.isatty():
        argv.append("-t")
    if (user := host_user()) is not None:
        argv += ["--user", user]
    if gpus:
        argv += ["--gpus", "all"]
    os.execvp(docker_cli, [*argv, image, *args])
