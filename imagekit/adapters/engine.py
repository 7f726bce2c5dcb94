"""Adapter: the Docker engine, through the Docker SDK for Python.

Engine trouble becomes `EngineUnavailableError` (exit 3) with a hint that says
what to do, never a traceback.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import docker
import docker.errors
import requests.exceptions

from imagekit.core import labels as L
from imagekit.core.ports import EngineInfo, Layer, LocalImage
from imagekit.errors import EngineError, EngineUnavailableError

PING_TIMEOUT_S = 15
START_HINT = (
    "start one: `make engine` (root on Debian/Ubuntu), `sudo systemctl start docker`, "
    "or point DOCKER_HOST at a running engine"
)


@contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Translate engine trouble while doing `action` into one line with a hint (exit 3):
    no engine, an engine that does not answer in time, or an engine that refuses."""
    where = os.environ.get("DOCKER_HOST", "the default socket")
    try:
        yield
    except requests.exceptions.Timeout as exc:
        raise EngineUnavailableError(
            f"the Docker engine at {where} did not answer in time while {action}: {_short(exc)}",
            "check that it is not stuck (`docker info`); restart it if it is",
        ) from None
    except (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError) as exc:
        raise EngineUnavailableError(
            f"no Docker engine answers at {where} while {action}: {_short(exc)}", START_HINT
        ) from None
    except docker.errors.APIError as exc:
        raise EngineError(
            f"the Docker engine refused while {action}: {_first_line(exc.explanation or exc)}",
            "see the engine's log; a full disk or an engine restart are the usual causes",
        ) from None
    except docker.errors.DockerException as exc:
        if "timed out" in str(exc):  # the SDK wraps a read timeout while asking the version
            raise EngineUnavailableError(
                f"the Docker engine at {where} did not answer in time while {action}",
                "check that it is not stuck (`docker info`); restart it if it is",
            ) from None
        raise EngineUnavailableError(
            f"no Docker engine answers at {where} while {action}: {_short(exc)}", START_HINT
        ) from None


def _short(exc: BaseException) -> str:
    return _first_line(exc) if str(exc) else type(exc).__name__


def _first_line(what: object) -> str:
    lines = str(what).splitlines()
    return lines[0][:200] if lines else ""


def connect(timeout_s: int = 600, ping_timeout_s: int | None = None) -> docker.DockerClient:
    """A client for the engine of DOCKER_HOST (or the default socket) that answers a ping.

    The ping has a short limit of its own: an engine that accepts a connection and never
    answers is reported within seconds, not after the long limit builds need.
    """
    with engine_errors("connecting"):
        probe = docker.from_env(version="auto", timeout=ping_timeout_s or PING_TIMEOUT_S)
        try:
            probe.ping()
        finally:
            probe.close()
        client = docker.from_env(version="auto", timeout=timeout_s)
    return client


def inspect_image(client: docker.DockerClient, reference: str) -> LocalImage | None:
    """The image `reference` names, or None when the engine has no such image."""
    with engine_errors(f"inspecting {reference}"):
        try:
            return LocalImage.from_inspect(client.api.inspect_image(reference))
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
        label = f"{L.RUN_ID}={run_id}" if run_id else L.RUN_ID
        for c in client.api.containers(all=True, filters={"label": label}):
            found.append(
                Leftover("container", c["Id"], ",".join(c.get("Names") or []), c["Created"])
            )
        if run_id:
            return sorted(found, key=lambda x: x.created_s)
        for c in client.api.containers(all=True, filters={"label": L.STAGE}):
            found.append(
                Leftover("container", c["Id"], ",".join(c.get("Names") or []), c["Created"])
            )
        for i in client.api.images(filters={"dangling": True, "label": L.STAGE}):
            found.append(Leftover("image", i["Id"], "<dangling builder stage>", i["Created"]))
        for i in client.api.images(filters={"dangling": True, "label": L.CELL}):
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


def engine_info(client: docker.DockerClient) -> EngineInfo:
    """Engine facts for run.json: versions, storage driver, cgroup, GPU runtimes."""
    with engine_errors("reading engine facts"):
        version = client.version()
        info = client.info()
    return EngineInfo(
        server_version=version.get("Version"),
        api_version=version.get("ApiVersion"),
        os=info.get("OperatingSystem"),
        storage_driver=info.get("Driver"),
        cgroup_version=info.get("CgroupVersion"),
        runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
        cpus=info.get("NCPU"),
        memory_bytes=info.get("MemTotal"),
    )


class DockerEngine:
    """The `Engine` port over the Docker SDK."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    def info(self) -> EngineInfo:
        """Versions, storage, runtimes."""
        return engine_info(self.client)

    def inspect_image(self, reference: str) -> LocalImage | None:
        """The image `reference` names; None when there is none."""
        return inspect_image(self.client, reference)

    def history(self, image_id: str) -> list[Layer]:
        """The image's layers, newest first."""
        return history(self.client, image_id)

    def pull(self, reference: str) -> str:
        """Pull `reference`; "" when it worked, else the engine's reason."""
        return pull_image(self.client, reference)

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        """Give `image_id` the name `repository:tag`."""
        with engine_errors(f"tagging {repository}:{tag}"):
            self.client.api.tag(image_id, repository, tag)

    def output_of(self, image_id: str, argv: list[str]) -> str:
        """What `argv` prints in a throw-away container of the image (no network, removed)."""
        with engine_errors(f"running {argv[0]} in {image_id[:19]}"):
            output = self.client.containers.run(
                image_id, argv, entrypoint=[], remove=True, network_mode="none"
            )
        return output.decode("utf-8", "replace") if isinstance(output, bytes) else str(output)
