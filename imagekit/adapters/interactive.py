"""Adapter: the interactive runs of `imagekit run` (`--shell`, `-- CMD`), which belong to the
docker CLI (it owns the terminal): the `docker run` command line, and whom it runs as."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import docker
import docker.errors

from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.workstation import owner_of
from imagekit.errors import InputError
from imagekit.kernel import labels as L
from imagekit.kernel.runtime import DEFAULT_SHM_BYTES
from imagekit.kernel.vocabulary import WORKSTATIONS, GpuMechanism
from imagekit.serve.decide import command_user


def user_for_command(
    engine: DockerEngine, image: str, workspace: Path, given: str | None
) -> str | None:
    """docker's `--user` for a shell or command in `image` (`serve.decide.command_user`): a
    full image's entrypoint decides by itself; for others, from this process, the folder and
    whether the engine runs as a user."""
    try:
        labels = engine.client.images.get(image).labels or {}
    except docker.errors.APIError:  # not here (docker run pulls it): no entrypoint known
        labels = {}
    return command_user(
        given,
        entrypoint=labels.get(L.FLAVOUR) in WORKSTATIONS,
        rootless=engine.info().rootless,
        me=(os.getuid(), os.getgid()),
        owner=owner_of(workspace),
    )


def docker_run_argv(
    docker_cli: str,
    image: str,
    args: list[str],
    workspace: Path,
    gpus: bool,
    tty: bool,
    gpu_mechanism: GpuMechanism = GpuMechanism.NVIDIA_RUNTIME,
    user: str | None = None,
) -> list[str]:
    """The `docker run` command line of an interactive shell or command in `image`, as `user`
    (`user_for_command`; None: as the image decides)."""
    argv = [
        docker_cli,
        "run",
        "--rm",
        "-i",
        "--shm-size",
        str(DEFAULT_SHM_BYTES),
        "-v",
        f"{workspace.resolve()}:/workspace",
        "--label",
        f"{L.RUN_ID}=run-cli",
    ]
    if tty:
        argv.append("-t")
    if user is not None:
        argv += ["--user", user]
    if gpus:
        cdi = gpu_mechanism == GpuMechanism.CDI
        argv += ["--device", "nvidia.com/gpu=all"] if cdi else ["--gpus", "all"]
    return [*argv, image, *args]


def exec_docker_run(
    engine: DockerEngine,
    image: str,
    command: tuple[str, ...],
    workspace: Path,
    gpus: bool,
    user: str | None,
) -> None:
    """Replace this process with `docker run` of `command` in `image`, or of its shell when
    there is none (`--shell`): the docker CLI owns the terminal. As `user_for_command` decides."""
    args = list(command) or ["shell"]
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise InputError("--shell and -- CMD need the docker CLI on PATH")
    as_user = user_for_command(engine, image, workspace, user)
    argv = docker_run_argv(
        docker_cli, image, args, workspace, gpus, sys.stdin.isatty(),
        engine.info().gpu_mechanism, as_user,
    )  # fmt: skip
    os.execvp(docker_cli, argv)
