"""Adapter: the Docker engine, through the Docker SDK for Python.

The only place (with the builders and the base bootstrap) that imports `docker`.
Engine trouble becomes `EngineUnavailableError` (exit 3) with a hint that says
what to do, never a traceback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors
import requests.exceptions

from imagekit.errors import EngineUnavailableError

LABEL_PREFIX = "io.imagekit."
INPUT_HASH_LABEL = "io.imagekit.input-hash"
STAGE_LABEL = "io.imagekit.stage"
RUN_LABEL = "io.imagekit.run-id"
MANAGED_LABEL = "io.imagekit.managed"

START_HINT = (
    "start one: `make engine` (root on Debian/Ubuntu), `sudo systemctl start docker`, "
    "or point DOCKER_HOST at a running engine"
)


@contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Translate connection failures while doing `action` into EngineUnavailableError."""
    try:
        yield
    except (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError) as exc:
        where = os.environ.get("DOCKER_HOST", "the default socket")
        raise EngineUnavailableError(
            f"no Docker engine answers at {where} while {action}: {_short(exc)}", START_HINT
        ) from None
    except docker.errors.DockerException as exc:
        if isinstance(exc, docker.errors.APIError):
            raise
        where = os.environ.get("DOCKER_HOST", "the default socket")
        raise EngineUnavailableError(
            f"no Docker engine answers at {where} while {action}: {_short(exc)}", START_HINT
        ) from None


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def connect(timeout_s: int = 600) -> docker.DockerClient:
    """A client for the engine of DOCKER_HOST (or the default socket) that answers a ping."""
    with engine_errors("connecting"):
        client = docker.from_env(version="auto", timeout=timeout_s)
        client.ping()
    return client


@dataclass(frozen=True)
class ImageFacts:
    """What the engine knows of one image."""

    id: str
    tags: tuple[str, ...]
    labels: dict[str, str]
    size_bytes: int
    layers: tuple[str, ...]
    created: str
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_attrs(cls, attrs: dict[str, Any]) -> ImageFacts:
        """Facts from `docker image inspect` output."""
        config = attrs.get("Config") or {}
        return cls(
            id=attrs["Id"],
            tags=tuple(attrs.get("RepoTags") or ()),
            labels=dict(config.get("Labels") or {}),
            size_bytes=int(attrs.get("Size") or 0),
            layers=tuple((attrs.get("RootFS") or {}).get("Layers") or ()),
            created=str(attrs.get("Created", "")),
            env=dict(e.split("=", 1) for e in config.get("Env") or [] if "=" in e),
        )


def inspect_image(client: docker.DockerClient, reference: str) -> ImageFacts | None:
    """The image `reference` names, or None when the engine has no such image."""
    with engine_errors(f"inspecting {reference}"):
        try:
            return ImageFacts.from_attrs(client.api.inspect_image(reference))
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            if exc.status_code == 404:
                return None
            raise


def pull_image(client: docker.DockerClient, reference: str) -> str:
    """Pull `reference`; "" when it worked, else the engine's reason."""
    name, sep, tag = reference.rpartition(":")
    if not sep or "/" in tag:
        name, tag = reference, "latest"
    with engine_errors(f"pulling {reference}"):
        try:
            for item in client.api.pull(name, tag, stream=True, decode=True):
                if "error" in item or "errorDetail" in item:
                    return str((item.get("errorDetail") or {}).get("message") or item["error"])
        except docker.errors.APIError as exc:
            return _short(exc)
    return ""


@dataclass(frozen=True)
class Layer:
    """One layer of an image's history: the instruction that made it and its size."""

    created_by: str
    size_bytes: int


def history(client: docker.DockerClient, image_id: str) -> list[Layer]:
    """The image's layers, newest first, as `docker history` shows them."""
    with engine_errors("reading image history"):
        items = client.api.history(image_id)
    return [Layer(str(i.get("CreatedBy", "")), int(i.get("Size") or 0)) for i in items]


@dataclass(frozen=True)
class Leftover:
    """Something imagekit made that `gc` may remove."""

    kind: str  # "container" | "image"
    id: str
    name: str
    created_s: float


def leftovers(client: docker.DockerClient, run_id: str | None = None) -> list[Leftover]:
    """Containers and dangling images that carry imagekit labels; with `run_id`, only the
    containers of that run (build stages carry no run id, and are the next build's cache)."""
    found: list[Leftover] = []
    with engine_errors("listing leftovers"):
        label = f"{RUN_LABEL}={run_id}" if run_id else RUN_LABEL
        for c in client.api.containers(all=True, filters={"label": label}):
            found.append(
                Leftover("container", c["Id"], ",".join(c.get("Names") or []), c["Created"])
            )
        if run_id:
            return sorted(found, key=lambda x: x.created_s)
        for c in client.api.containers(all=True, filters={"label": STAGE_LABEL}):
            found.append(
                Leftover("container", c["Id"], ",".join(c.get("Names") or []), c["Created"])
            )
        for i in client.api.images(filters={"dangling": True, "label": STAGE_LABEL}):
            found.append(Leftover("image", i["Id"], "<dangling builder stage>", i["Created"]))
        for i in client.api.images(filters={"dangling": True, "label": "io.imagekit.cell"}):
            found.append(Leftover("image", i["Id"], "<dangling imagekit image>", i["Created"]))
    unique = {(x.kind, x.id): x for x in found}
    return sorted(unique.values(), key=lambda x: (x.kind, x.created_s))


def remove(client: docker.DockerClient, item: Leftover) -> str | None:
    """Remove one leftover; None when done, else why not."""
    with engine_errors(f"removing {item.kind} {item.id[:12]}"):
        try:
            if item.kind == "container":
                client.api.remove_container(item.id, force=True, v=True)
            else:
                client.api.remove_image(item.id, noprune=False)
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as exc:
            return _short(exc)
    return None


def age_s(item: Leftover, now_s: float | None = None) -> float:
    """Seconds since `item` was created."""
    return (now_s if now_s is not None else time.time()) - item.created_s


def engine_info(client: docker.DockerClient) -> dict[str, Any]:
    """Engine facts for run.json: versions, storage driver, cgroup, GPU runtimes."""
    with engine_errors("reading engine facts"):
        version = client.version()
        info = client.info()
    return {
        "server_version": version.get("Version"),
        "api_version": version.get("ApiVersion"),
        "os": info.get("OperatingSystem"),
        "storage_driver": info.get("Driver"),
        "cgroup_version": info.get("CgroupVersion"),
        "runtimes": sorted((info.get("Runtimes") or {}).keys()),
        "cpus": info.get("NCPU"),
        "memory_bytes": info.get("MemTotal"),
    }
