"""The run command: a full image's services, started the right way."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

import typer

from imagekit.cli.common import app, remove_orphans, say
from imagekit.cli.options import command
from imagekit.errors import InputError
from imagekit.serve.decide import Service
from imagekit.serve.requests import RunCommand

if TYPE_CHECKING:
    from imagekit.adapters.engine import DockerEngine
    from imagekit.adapters.workstation import RunRequest
    from imagekit.kernel.engine import EngineInfo


def _run_request(service: dict[str, bool], command: tuple[str, ...], **options: Any) -> RunCommand:
    """The request, its service the one flag given (or the command after --)."""
    chosen = RunCommand.pick_service(service, command)
    return RunCommand(service=chosen, command=command, **options)


@command(
    app,
    "run",
    RunCommand,
    _run_request,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def run(request: RunCommand) -> None:
    """Serve until Ctrl-C, SIGTERM or SIGHUP (the container goes with it); a shell or a command
    replaces this process with `docker run`."""
    from imagekit.adapters import workstation
    from imagekit.adapters.engine import open_engine
    from imagekit.serve.decide import INTERACTIVE, run_gpus

    engine = open_engine()
    remove_orphans(engine)
    info = engine.info()
    gpus = run_gpus(request.image, request.workspace, request.gpus, info)
    if request.service in INTERACTIVE:
        _exec_docker_run(request, gpus, engine)
    service = _service(request, gpus, info)
    workstation.check(service)  # a port taken, no key: said before "starting"
    say(
        f"starting {request.image} ({request.service}) in container {service.container_name}; "
        "waiting for it to answer ..."
    )

    def ready(how: str) -> None:
        typer.echo(how)
        say("Ctrl-C stops and removes the container")

    workstation.serve(engine, service, ready, sys.stderr.write)


def _service(request: RunCommand, gpus: bool, info: EngineInfo) -> RunRequest:
    """What to start (the user: --user as given, else the image's entrypoint decides)."""
    from imagekit.adapters import workstation

    keys = request.authorized_keys
    if keys is None and request.service is Service.SSH:
        keys = workstation.default_public_key()
    return workstation.RunRequest(
        image=request.image,
        service=request.service,
        workspace=request.workspace,
        gpus=gpus,
        host_ports=dict(request.ports),
        user=request.user,
        authorized_keys=keys,
        engine=info,
    )


def _exec_docker_run(request: RunCommand, gpus: bool, engine: DockerEngine) -> None:
    """Interactive runs belong to the docker CLI, which owns the terminal; replace this process."""
    import shutil

    from imagekit.adapters import interactive

    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise InputError("--shell and -- CMD need the docker CLI on PATH")
    args = ["shell"] if request.service is Service.SHELL else list(request.command)
    user = interactive.user_for_command(engine, request.image, request.workspace, request.user)
    argv = interactive.docker_run_argv(
        docker_cli, request.image, args, request.workspace, gpus, sys.stdin.isatty(),
        engine.info().gpu_mechanism, user,
    )  # fmt: skip
    os.execvp(docker_cli, argv)
