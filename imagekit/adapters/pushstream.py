"""Adapter: one push through the engine, read within a deadline and cancelled when it passes.

An engine keeps retrying a layer upload the registry breaks (Docker 20.10 logs "Upload failed,
retrying" every two minutes for as long as it takes), and its push stream says nothing the
client could act on: docker-py's `push` would wait on it without bound. Here the stream is read
in a worker thread while the caller waits at most the time left; when it runs out, the
connection is shut down, which makes the engine cancel the push, and the layers not yet pushed
are named with the last thing the engine said of each.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

import docker.auth
import docker.errors
import requests

from imagekit.adapters.engine import DockerEngine
from imagekit.kernel.json import JsonValue, as_object

# The statuses that end a layer's push well.
DONE = frozenset({"Pushed", "Layer already exists", "Mounted from"})


@dataclass
class PushProgress:
    """What the engine's stream said so far: each layer's last status, and its error."""

    layers: dict[str, str] = field(default_factory=dict)  # layer id -> last status
    error: str | None = None

    def read(self, item: Mapping[str, JsonValue]) -> None:
        """Take one item of the stream."""
        if "error" in item or "errorDetail" in item:
            detail = as_object(item.get("errorDetail"))
            self.error = str(detail.get("message") or item.get("error") or "push failed")
            return
        layer, status = item.get("id"), item.get("status")
        if layer and status and len(str(layer)) >= 12 and ":" not in str(layer):
            progress = item.get("progress")
            self.layers[str(layer)] = f"{status} {progress}".strip() if progress else str(status)

    def pending(self) -> list[str]:
        """`layer: last status` of each layer not pushed yet."""
        return [
            f"{layer}: {status}"
            for layer, status in self.layers.items()
            if not any(status.startswith(done) for done in DONE)
        ]


def _auth_header(
    engine: DockerEngine, repository: str, auth: Mapping[str, str] | None
) -> dict[str, str]:
    if auth is None:
        registry, _ = docker.auth.resolve_repository_name(repository)
        header = docker.auth.get_config_header(engine.client.api, registry)
        return {"X-Registry-Auth": header.decode()} if header else {}
    return {"X-Registry-Auth": docker.auth.encode_header(auth).decode()}


def _shut(response: requests.Response) -> None:
    """Shut the connection under `response` down, so that a thread blocked reading it wakes
    and the engine sees its client go (and cancels the push)."""
    raw = response.raw
    connection = getattr(raw, "_connection", None) or getattr(raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        response.close()


def push_within(
    engine: DockerEngine,
    repository: str,
    tag: str,
    auth: Mapping[str, str] | None,
    left_s: float | None,
) -> str | None:
    """Push `repository:tag` through the engine; None when it worked, else what went wrong.

    With `left_s`, the push may take that long at most: then it is cancelled and the error
    names the layers that were still moving. Engine trouble (no engine, a refusal) raises as
    docker-py does; the caller translates it.
    """
    api = engine.client.api
    # The request docker-py's push makes, with the response kept to shut it down.
    name = urllib.parse.quote(repository, safe="/:")
    # Without credentials, engines before API 1.42 read them from the body: an empty object.
    response = api.post(
        f"{api.base_url}/v{api.api_version}/images/{name}/push",
        data=b"{}",
        headers={"Content-Type": "application/json", **_auth_header(engine, repository, auth)},
        params={"tag": tag},
        stream=True,
    )
    try:
        response.raise_for_status()
    except requests.exceptions.HTTPError as exc:
        docker.errors.create_api_error_from_http_exception(exc)
    progress = PushProgress()

    def read() -> None:
        try:
            for line in response.iter_lines():
                if line:
                    with contextlib.suppress(ValueError):
                        progress.read(json.loads(line))
        except (requests.exceptions.RequestException, OSError, AttributeError, ValueError):
            progress.error = progress.error or "the engine's push stream broke off"

    reader = threading.Thread(target=read, name=f"push {repository}:{tag}", daemon=True)
    reader.start()
    reader.join(left_s)
    if reader.is_alive():
        _shut(response)
        reader.join(5)
        moving = progress.pending()
        where = "; ".join(moving[:4]) + (f"; and {len(moving) - 4} more" if len(moving) > 4 else "")
        return (
            f"deadline: the push of {repository}:{tag} was still running after {left_s:g}s and "
            f"was cancelled ({where or 'no layer had started'})"
        )
    return progress.error
