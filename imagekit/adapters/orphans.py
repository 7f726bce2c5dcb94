"""Adapter: containers whose imagekit run ended without removing them, found and removed by
the next run on the same machine.

A run removes what it made, Ctrl-C included; it cannot when the engine dies under it (the
engine keeps the container, stopped, once it is back) or when the run itself is killed with
SIGKILL. Every container a run makes carries its owner, `host/pid/start` (the process's start
time in clock ticks since boot, so that a pid handed out again is not taken for it): a container
whose owner was on this machine and is gone can be used by nobody, and goes. Containers of
owners on other machines (a shared remote engine) are left to `imagekit gc`.

The classic builder's step containers carry no owner (the engine makes them), but those of
builder stages carry the stage label: one that ended badly is never committed (imagekit builds
with forcerm, so the builder removes a failed step's container at once), so a stopped one with a
non-zero exit code is what an engine that died under a build left.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from imagekit.adapters.engine import DockerEngine, engine_errors
from imagekit.kernel import labels as L
from imagekit.kernel.json import JsonObject, as_list

PROC = Path("/proc")


def _start_ticks(pid: int, proc: Path = PROC) -> str | None:
    """The start time of process `pid` in clock ticks since boot; None when there is none."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: count from its end.
    return stat.rsplit(")", 1)[1].split()[19]


def owner(proc: Path = PROC) -> str:
    """This process as the owner of what it makes: `host/pid/start ticks`."""
    pid = os.getpid()
    return f"{socket.gethostname()}/{pid}/{_start_ticks(pid, proc) or '?'}"


def owner_gone(value: str, host: str | None = None, proc: Path = PROC) -> bool:
    """Whether the owner `value` was a process of this machine that no longer runs; False for
    an owner on another machine or a label in another form (nothing can be known)."""
    parts = value.split("/")
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    owner_host, pid, ticks = parts
    if owner_host != (host if host is not None else socket.gethostname()):
        return False
    return _start_ticks(int(pid), proc) != ticks


@dataclass(frozen=True)
class Orphan:
    """A container no run can still be using, and why."""

    id: str
    name: str
    why: str


def is_failed_build_step(labels: dict[str, str], state: str, exit_code: int) -> bool:
    """A builder stage's step container that stopped and ended badly (see the module's doc)."""
    return L.STAGE in labels and state in ("exited", "dead") and exit_code != 0


def find_orphans(engine: DockerEngine, host: str | None = None) -> list[Orphan]:
    """The containers on this engine whose run ended without removing them."""
    client, found = engine.client, []
    with engine_errors("looking for containers of runs that ended"):
        for c in client.api.containers(all=True, filters={"label": L.OWNER}):
            labels = c.get("Labels") or {}
            if owner_gone(labels.get(L.OWNER, ""), host):
                found.append(Orphan(c["Id"], _name(c), "its run ended without removing it"))
        for c in client.api.containers(all=True, filters={"label": L.STAGE}):
            state = str(c.get("State", ""))
            if state not in ("exited", "dead"):
                continue
            exit_code = int(client.api.inspect_container(c["Id"])["State"].get("ExitCode", 0))
            if is_failed_build_step(c.get("Labels") or {}, state, exit_code):
                found.append(Orphan(c["Id"], _name(c), f"a build step that ended ({exit_code})"))
    return found


def remove_orphans(engine: DockerEngine, host: str | None = None) -> list[Orphan]:
    """Remove the orphans `find_orphans` finds; the ones removed (one already gone counts)."""
    removed = []
    for orphan in find_orphans(engine, host):
        with engine_errors(f"removing container {orphan.id[:12]}"):
            try:
                engine.client.api.remove_container(orphan.id, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError:
                continue  # being removed already, or in use after all: gc's to decide
        removed.append(orphan)
    return removed


def removed_line(removed: list[Orphan]) -> str:
    """One line for people on what `remove_orphans` removed; "" when nothing."""
    if not removed:
        return ""
    names = ", ".join(o.name or o.id[:12] for o in removed[:3])
    more = ", ..." if len(removed) > 3 else ""
    plural = "s" if len(removed) > 1 else ""
    return (
        f"removed {len(removed)} container{plural} that ended runs left behind "
        f"({names}{more}: {removed[0].why})"
    )


def _name(container: JsonObject) -> str:
    names = as_list(container.get("Names"))
    return str(names[0]).lstrip("/") if names else ""
