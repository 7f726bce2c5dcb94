"""Adapter: the Docker engine, through the Docker SDK for Python.

One door: `open_engine` connects, and the `DockerEngine` it returns holds the connection and
makes the engine's calls; the other adapters are built from it, and nothing above the adapters
holds the SDK's client. Engine trouble becomes `EngineUnavailableError` (exit 3) with a hint
that says what to do, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TypedDict, Unpack

import docker
import docker.context
import docker.errors
import docker.types
import requests.exceptions
import urllib3.exceptions
from docker.models.containers import Container

from imagekit.adapters.engine_facts import (
    cdi_devices,
    container_limits,
    image_from_inspect,
    image_store,
)
from imagekit.errors import EngineError, EngineUnavailableError
from imagekit.kernel.engine import EngineInfo, Layer, LocalImage
from imagekit.kernel.json import JsonObject, as_list
from imagekit.kernel.reference import parse
from imagekit.kernel.vocabulary import EngineName, ImageStore

PING_TIMEOUT_S = 15
DEFAULT_SOCKET = "unix:///var/run/docker.sock"
START_HINT = (
    "start one: `make engine` (root on Debian/Ubuntu), `sudo systemctl start docker`, "
    "or point DOCKER_HOST at a running engine"
)


# An answer the engine had begun and never finished: it stopped (killed, restarted) under a
# request. requests raises the first for a streamed body, urllib3 the second for a whole one.
ENGINE_WENT_AWAY: tuple[type[BaseException], ...] = (
    requests.exceptions.ChunkedEncodingError,
    urllib3.exceptions.ProtocolError,
)


def engine_went_away(where: str, action: str, exc: BaseException) -> EngineUnavailableError:
    """The error for an engine that stopped answering in the middle of `action`."""
    return EngineUnavailableError(
        f"the Docker engine at {where} stopped in the middle of {action}: {short_error(exc)}",
        "see why in the engine's log and start it again; the containers this run had on it are "
        "removed by the next imagekit run on this machine (or `imagekit gc`)",
    )


@contextmanager
def engine_errors(action: str) -> Iterator[None]:
    """Translate engine trouble while doing `action` into one line with a hint (exit 3):
    no engine, an engine that does not answer in time, or an engine that refuses."""
    where = endpoint()
    try:
        yield
    except requests.exceptions.Timeout as exc:
        raise EngineUnavailableError(
            f"the Docker engine at {where} did not answer in time while {action}: "
            f"{short_error(exc)}",
            "check that it is not stuck (`docker info`); restart it if it is",
        ) from None
    except ENGINE_WENT_AWAY as exc:
        raise engine_went_away(where, action, exc) from None
    except (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError) as exc:
        raise EngineUnavailableError(
            f"no Docker engine answers at {where} while {action}: {short_error(exc)}", START_HINT
        ) from None
    except docker.errors.APIError as exc:
        said = _first_line(exc.explanation or exc)
        raise EngineError(
            f"the engine at {where} refused while {action}: {said}", refusal_hint(said)
        ) from None
    except docker.errors.DockerException as exc:
        if "timed out" in str(exc):  # the SDK wraps a read timeout while asking the version
            raise EngineUnavailableError(
                f"the Docker engine at {where} did not answer in time while {action}",
                "check that it is not stuck (`docker info`); restart it if it is",
            ) from None
        raise EngineUnavailableError(
            f"no Docker engine answers at {where} while {action}: {short_error(exc)}", START_HINT
        ) from None


# What engines say when they lack something a user can add, and what to add.
KNOWN_REFUSALS = (
    (
        "init binary not found",
        "install Podman's init, catatonit (Debian/Ubuntu: apt-get install catatonit)",
    ),
    (
        "error setting rlimit",
        "the engine may not raise its containers' limits here: set default_ulimits "
        '(e.g. ["nofile=20000:20000"]) in containers.conf',
    ),
    (
        # crun (Podman 5's default runtime) on a host with cgroup v1 and a v2 mount beside it.
        "cgroups in hybrid mode not supported",
        'crun refuses hosts with hybrid cgroups: install runc and set runtime = "runc" in the '
        "[engine] table of containers.conf",
    ),
    (
        # netavark (Podman 5's network) defaults to nftables on Debian 13 without depending on it.
        "unable to execute nft",
        "Podman's netavark needs nft: install nftables, or set firewall_driver = "
        '"iptables" in the [network] table of containers.conf',
    ),
    (
        "server gave HTTP response to HTTPS client",
        "the registry speaks plain HTTP: Podman needs it marked `insecure = true` in "
        "registries.conf (Docker allows loopback registries by default)",
    ),
    (
        "no space left on device",
        "free space on the engine's disk (`docker system df`, `imagekit gc`)",
    ),
)


def refusal_hint(said: str) -> str:
    """What to do about an engine's refusal: specific where the message is known."""
    for needle, hint in KNOWN_REFUSALS:
        if needle in said:
            return hint
    return "see the engine's log; a full disk or an engine restart are the usual causes"


def short_error(exc: BaseException) -> str:
    """The first line of what an engine error says (its type where it says nothing)."""
    return _first_line(exc) if str(exc) else type(exc).__name__


def _first_line(what: object) -> str:
    lines = str(what).splitlines()
    return lines[0][:200] if lines else ""


def endpoint() -> str:
    """Where the engine is: DOCKER_HOST, else the current Docker context's host (as the
    docker CLI and buildx use it), else the default socket."""
    host = os.environ.get("DOCKER_HOST")
    if host:
        return host
    try:
        context = docker.context.ContextAPI.get_current_context()
    except Exception:  # a broken CLI config is the CLI's business, not ours
        context = None
    if context is not None and context.name != "default" and context.Host:
        return str(context.Host)
    return DEFAULT_SOCKET


def connect(timeout_s: int = 600, ping_timeout_s: int | None = None) -> docker.DockerClient:
    """A client for the engine `endpoint()` names, that answers a ping.

    The ping has a short limit of its own: an engine that accepts a connection and never
    answers is reported within seconds, not after the long limit builds need.
    """
    with engine_errors("connecting"):
        probe = _client(ping_timeout_s or PING_TIMEOUT_S)
        try:
            probe.ping()
        finally:
            probe.close()
        client = _client(timeout_s)
    return client


def _client(timeout_s: int) -> docker.DockerClient:
    where = endpoint()
    # ssh://: the system's ssh client, with the user's keys and config (no paramiko).
    ssh = where.startswith("ssh://")
    if os.environ.get("DOCKER_HOST"):
        return docker.from_env(version="auto", timeout=timeout_s, use_ssh_client=ssh)
    context = docker.context.ContextAPI.get_current_context() if where != DEFAULT_SOCKET else None
    tls = context.TLSConfig if context is not None else None
    return docker.DockerClient(
        base_url=where, version="auto", timeout=timeout_s, tls=tls or False, use_ssh_client=ssh
    )


def open_engine(timeout_s: int = 600, ping_timeout_s: int | None = None) -> DockerEngine:
    """The engine `endpoint()` names, connected and answering (`connect`): the one door to it
    that the CLI opens and hands to the adapters it wires."""
    return DockerEngine(connect(timeout_s, ping_timeout_s))


def without_entrypoint(argv: list[str]) -> tuple[list[str], list[str]]:
    """(entrypoint, command) that run `argv` as it is, whatever the image's ENTRYPOINT: its
    program as the entrypoint, the rest as the command. An empty entrypoint is not that
    everywhere: Podman's Docker API takes `[]` for "not set" and runs the image's own (a full
    image's tini and services)."""
    return argv[:1], argv[1:]


class ContainerOptions(TypedDict, total=False):
    """What a throw-away container is given beside its image and command (docker-py's keyword
    arguments of `containers.create`)."""

    network_mode: str
    labels: dict[str, str]
    environment: dict[str, str]
    ulimits: list[docker.types.Ulimit]


class DockerEngine:
    """One connection to a Docker engine (Docker, either image store, or Podman) and every
    call imagekit makes of it: the `Engine` port, and what the other adapters of this package
    build on it (containers, their output). Each call's trouble is translated
    (`engine_errors`)."""

    def __init__(self, client: docker.DockerClient) -> None:
        # The SDK's client: the adapters of this package reach it for the calls that are
        # theirs alone (a probe container, a build, a push); nothing above them holds it.
        self.client = client
        self._info: EngineInfo | None = None

    def info(self) -> EngineInfo:
        """Which engine, its store, versions, runtimes (read once)."""
        if self._info is None:
            self._info = self._read_info()
        return self._info

    def _read_info(self) -> EngineInfo:
        """Engine facts for run.json and doctor: which engine, its image store, its GPU
        mechanism (an NVIDIA runtime or CDI devices), versions, storage driver, cgroup."""
        with engine_errors("reading engine facts"):
            version = self.client.version()
            info = self.client.info()
        where = endpoint()
        podman = any(
            "podman" in str(c.get("Name", "")).lower() for c in version.get("Components") or []
        )
        return EngineInfo(
            server_version=version.get("Version"),
            api_version=version.get("ApiVersion"),
            os=info.get("OperatingSystem"),
            storage_driver=info.get("Driver"),
            cgroup_version=info.get("CgroupVersion"),
            runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
            cpus=info.get("NCPU"),
            memory_bytes=info.get("MemTotal"),
            name=EngineName.PODMAN if podman else EngineName.DOCKER,
            image_store=ImageStore.PODMAN if podman else image_store(info),
            cdi_devices=cdi_devices(info, podman=podman, local=where.startswith("unix://")),
            endpoint=where,
            architecture=info.get("Architecture"),
            rootless=self._rootless(info, podman=podman),
        )

    def _rootless(self, info: JsonObject, *, podman: bool) -> bool:
        """Whether the engine runs as a user: Docker says so among its security options;
        Podman's Docker API does not, its own API does (`host.security.rootless`)."""
        if any("rootless" in str(option) for option in as_list(info.get("SecurityOptions"))):
            return True
        if not podman:
            return False
        api = self.client.api
        with contextlib.suppress(Exception):  # an older Podman without it: not known, not rootless
            answer = api.get(f"{api.base_url}/v4.0.0/libpod/info", timeout=PING_TIMEOUT_S)
            if answer.ok:
                return bool(answer.json().get("host", {}).get("security", {}).get("rootless"))
        return False

    def local_image(self, reference: str) -> LocalImage | None:
        """The image `reference` names as the engine inspects it, or None when the engine has
        no such image (its size: the store's own figure, see `inspect_image`)."""
        with engine_errors(f"inspecting {reference}"):
            try:
                return image_from_inspect(self.client.api.inspect_image(reference))
            except docker.errors.ImageNotFound:
                return None
            except docker.errors.APIError as exc:
                if exc.status_code == 404:
                    return None
                raise

    def inspect_image(self, reference: str) -> LocalImage | None:
        """The image `reference` names; None when there is none. Its size is the sum of its
        unpacked layers on every store."""
        image = self.local_image(reference)
        if image is not None and self.info().image_store == ImageStore.CONTAINERD:
            image = replace(image, size_bytes=self.uncompressed_size(image.id))
        return image

    def uncompressed_size(self, reference: str) -> int:
        """The image's size unpacked, the sum of its layers as `docker history` gives them (on
        the containerd store, its snapshots' disk usage, a few per cent above the classic
        store's byte counts). The containerd store's own `Size` is the compressed content, a
        measure that budgets and benchmarks must not mix with this one."""
        with engine_errors(f"reading the layers of {reference}"):
            return sum(int(i.get("Size") or 0) for i in self.client.api.history(reference))

    def history(self, image_id: str) -> list[Layer]:
        """The image's layers, newest first, as `docker history` shows them."""
        with engine_errors("reading image history"):
            items = self.client.api.history(image_id)
        return [Layer(str(i.get("CreatedBy", "")), int(i.get("Size") or 0)) for i in items]

    def pull(self, reference: str, platform: str | None = None) -> str:
        """Pull `reference` (for `platform`); "" when it worked, else the engine's reason."""
        ref = parse(reference)
        with engine_errors(f"pulling {reference}"):
            try:
                # The engine's pull takes a digest in the tag's place, as docker-py's own does.
                name, tag = ref.familiar_name, ref.reference_in_api
                stream = self.client.api.pull(
                    name, tag, stream=True, decode=True, platform=platform
                )
                for item in stream:
                    if "error" in item or "errorDetail" in item:
                        return str((item.get("errorDetail") or {}).get("message") or item["error"])
            except docker.errors.APIError as exc:
                return short_error(exc)
        return ""

    def tag(self, image_id: str, repository: str, tag: str) -> None:
        """Give `image_id` the name `repository:tag`."""
        with engine_errors(f"tagging {repository}:{tag}"):
            self.client.api.tag(image_id, repository, tag)

    def started_container(
        self,
        image: str,
        argv: list[str],
        *,
        through_entrypoint: bool = False,
        **options: Unpack[ContainerOptions],
    ) -> Container:
        """A started, detached container running `argv`, by itself or (`through_entrypoint`)
        as the command of the image's entrypoint. A start the engine refuses removes the
        container it made: `containers.run` would leave it Created."""
        containers = self.client.containers
        if through_entrypoint:
            container = containers.create(image, argv, detach=True, **options)
        else:
            entrypoint, command = without_entrypoint(argv)
            container = containers.create(
                image, command, entrypoint=entrypoint, detach=True, **options
            )
        try:
            container.start()
        except BaseException:
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                container.remove(force=True, v=True)
            raise
        return container

    def container_output(
        self,
        image: str,
        argv: list[str],
        *,
        through_entrypoint: bool = False,
        **options: Unpack[ContainerOptions],
    ) -> bytes:
        """What `argv` prints on stdout in a container of `image` (`started_container`) that
        is gone afterwards, however it ends."""
        container = self.started_container(
            image, argv, through_entrypoint=through_entrypoint, **options
        )
        try:
            container.wait()
            return bytes(container.logs(stdout=True, stderr=False))
        finally:
            with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                container.remove(force=True, v=True)

    def output_of(self, image_id: str, argv: list[str]) -> str:
        """What `argv` prints in a throw-away container of the image (no network, removed)."""
        with engine_errors(f"running {argv[0]} in {image_id[:19]}"):
            output = self.container_output(
                image_id, argv, network_mode="none", **container_limits(self.info())
            )
        return output.decode("utf-8", "replace")
