"""The run command: a full image's services, started the right way."""

from __future__ import annotations

import sys
from typing import Any

import typer

from imagekit.cli.common import app, note_leftovers, say
from imagekit.cli.options import command
from imagekit.serve.decide import INTERACTIVE, pick_service, run_gpus
from imagekit.serve.requests import RunCommand


def _run_request(service: dict[str, bool], command: tuple[str, ...], **options: Any) -> RunCommand:
    """The request, its service the one flag given (or the command after --)."""
    chosen = pick_service(service, command)
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
    from imagekit.adapters import interactive, workstation
    from imagekit.adapters.engine import open_engine

    engine = open_engine()
    note_leftovers(engine, others=False)
    info = engine.info()
    gpus = run_gpus(request.image, request.workspace, request.gpus, info)
    if request.service in INTERACTIVE:
        command = request.command
        interactive.exec_docker_run(
            engine, request.image, command, request.workspace, gpus, request.user
        )
    # The user: --user as given, else the image's entrypoint decides.
    keys = workstation.ssh_keys(request.service, request.authorized_keys)
    service = workstation.RunRequest(
        image=request.image,
        service=request.service,
        workspace=request.workspace,
        gpus=gpus,
        host_ports=dict(request.ports),
        user=request.user,
        authorized_keys=keys,
        engine=info,
    )
    workstation.check(service)  # a port taken, no key: said before "starting"
    say(
        f"starting {request.image} ({request.service}) in container {service.container_name}; "
        "waiting for it to answer ..."
    )
    workstation.serve(engine, service, _ready, sys.stderr.write)


def _ready(how: str) -> None:
    typer.echo(how)
    say("Ctrl-C stops and removes the container")
