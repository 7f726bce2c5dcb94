"""Adapter: pushing tags through the Docker SDK and reading digests back from the registry.

docker-py's push never raises for a failed push: the failure is an `error` /
`errorDetail` item inside the stream, so the whole stream is read. Transient
failures are retried with backoff a bounded number of times; permanent ones are
not. Credentials come from the Docker config or the environment and are never
written to logs or results.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions

from imagekit.adapters.engine import engine_errors
from imagekit.core.ports import PushOutcome, RemoteManifest
from imagekit.core.retry import Backoff
from imagekit.errors import RegistryError

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)
TRANSIENT = re.compile(
    r"(connection reset|connection refused|broken pipe|timeout|timed out|temporarily|"
    r"\b50[0234]\b|service unavailable|bad gateway|gateway|EOF|i/o timeout|TLS handshake)",
    re.IGNORECASE,
)
PERMANENT = re.compile(
    r"(denied|unauthori[sz]ed|forbidden|manifest invalid|name invalid|name unknown|"
    r"blob unknown|tag invalid|unsupported)",
    re.IGNORECASE,
)


def classify(message: str) -> str:
    """`permanent` or `transient`: whether retrying a push that failed this way can help."""
    if PERMANENT.search(message):
        return "permanent"
    if TRANSIENT.search(message):
        return "transient"
    return "permanent"


def split_reference(reference: str) -> tuple[str, str, str]:
    """("127.0.0.1:5000", "team/pytorch", "tag") from a full reference."""
    name, _, tag = reference.rpartition(":")
    host, _, path = name.partition("/")
    return host, path, tag


def registry_auth(host: str, environ: dict[str, str] | None = None) -> dict[str, str] | None:
    """Credentials for `host`: IMAGEKIT_REGISTRY_USER/PASSWORD, else the Docker config's."""
    env = os.environ if environ is None else environ
    user, password = env.get("IMAGEKIT_REGISTRY_USER"), env.get("IMAGEKIT_REGISTRY_PASSWORD")
    if user and password:
        return {"username": user, "password": password}
    config = Path(env.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        auths = json.loads(config.read_text()).get("auths", {})
    except (OSError, json.JSONDecodeError):
        return None
    entry = auths.get(host) or auths.get(f"https://{host}") or {}
    if "auth" in entry:
        user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        return {"username": user, "password": password}
    return None


def _push_once(client: docker.DockerClient, repository: str, tag: str, auth: Any) -> str | None:
    """One push; None when it worked, else the error the stream (or the engine) reported."""
    with engine_errors(f"pushing {repository}:{tag}"):
        try:
            stream = client.api.push(repository, tag, stream=True, decode=True, auth_config=auth)
            for item in stream:
                if "error" in item or "errorDetail" in item:
                    detail = item.get("errorDetail") or {}
                    return str(detail.get("message") or item.get("error") or "push failed")
        except docker.errors.APIError as exc:
            return str(exc.explanation or exc)
        except requests.exceptions.RequestException as exc:
            return f"connection to the engine failed: {exc}"
    return None


def push(
    client: docker.DockerClient,
    reference: str,
    *,
    attempts: int = 4,
    backoff_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    auth: Any = None,
    deadline_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> PushOutcome:
    """Push `reference`, retrying transient failures with exponential backoff, within
    `deadline_s` seconds in all when given."""
    repository, _, tag = reference.rpartition(":")
    errors: list[str] = []
    backoff = Backoff(attempts, backoff_s, deadline_s, clock)
    attempt = 0
    while True:
        attempt += 1
        error = _push_once(client, repository, tag, auth)
        if error is None:
            return PushOutcome(True, attempt, errors=tuple(errors))
        errors.append(error)
        kind = classify(error)
        delay = None if kind == "permanent" else backoff.delay_after(attempt)
        if delay is None:
            if kind == "transient" and attempt < attempts:
                error += f" (gave up: the {deadline_s:g}s publish deadline would pass)"
            return PushOutcome(False, attempt, error=error, kind=kind, errors=tuple(errors))
        sleep(delay)


def _scheme(host: str) -> str:
    plain = host.startswith(("127.", "localhost", "[::1]"))
    return "http" if plain else "https"


def _request(
    url: str, auth: dict[str, str] | None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, headers={"Accept": MANIFEST_TYPES})
    if auth:
        token = base64.b64encode(f"{auth['username']}:{auth['password']}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def _bearer(challenge: str, auth: dict[str, str] | None) -> str | None:
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    if "realm" not in fields:
        return None
    query = {k: v for k, v in fields.items() if k in ("service", "scope")}
    status, _, body = _request(f"{fields['realm']}?{urllib.parse.urlencode(query)}", auth)
    if status != 200:
        return None
    data = json.loads(body)
    return str(data.get("token") or data.get("access_token") or "") or None


def _get(url: str, host: str, auth: dict[str, str] | None) -> tuple[int, dict[str, str], bytes]:
    """GET `url`, answering a Bearer challenge once; RegistryError when unreachable (transient
    unless the connection was refused: nothing listens there, and waiting will not help)."""
    try:
        status, headers, body = _request(url, auth)
        if status == 401 and "Bearer" in headers.get("Www-Authenticate", ""):
            token = _bearer(headers["Www-Authenticate"], auth)
            request = urllib.request.Request(url, headers={"Accept": MANIFEST_TYPES})
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    status, headers, body = response.status, dict(response.headers), response.read()
            except urllib.error.HTTPError as exc:
                status, headers, body = exc.code, dict(exc.headers), exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        refused = isinstance(reason, ConnectionRefusedError)
        raise RegistryError(
            f"cannot reach the registry {host}: {reason}",
            f"start the registry at {host}, or name the right one with --registry"
            if refused
            else f"check the network path to {host}",
            transient=not refused,
        ) from None
    return status, headers, body


def remote_manifest(reference: str, auth: dict[str, str] | None = None) -> RemoteManifest | None:
    """The registry's digest and config digest (= image id) for a tag; None if absent."""
    host, path, tag = split_reference(reference)
    status, headers, body = _get(f"{_scheme(host)}://{host}/v2/{path}/manifests/{tag}", host, auth)
    if status == 404:
        return None
    if status in (401, 403):
        raise RegistryError(
            f"registry {host} asks for credentials ({status}) for {path}:{tag}",
            f"log in first: docker login {host}",
        )
    if status != 200:
        raise RegistryError(
            f"registry {host} answered {status} for {path}:{tag}",
            "the registry failed; try again later, or see its log",
            transient=status >= 500 or status == 429,
        )
    manifest = json.loads(body)
    digest = headers.get("Docker-Content-Digest") or headers.get("docker-content-digest") or ""
    return RemoteManifest(digest, str((manifest.get("config") or {}).get("digest", "")))


def remote_config(reference: str, auth: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The image config (its `config.Labels`, `config.Env`) of a tag, read from the registry
    without pulling a layer; None when the tag is absent."""
    manifest = remote_manifest(reference, auth)
    if manifest is None or not manifest.config:
        return None
    host, path, _ = split_reference(reference)
    url = f"{_scheme(host)}://{host}/v2/{path}/blobs/{manifest.config}"
    status, _, body = _get(url, host, auth)
    if status != 200:
        raise RegistryError(f"registry {host} answered {status} for the config of {reference}")
    config: dict[str, Any] = json.loads(body)
    return config


class HttpRegistry:
    """The `Registry` port: manifests over the registry HTTP API, pushes through the engine.

    Credentials come from the Docker config of the host each reference names. Transient
    failures (5xx, 429, a dropped connection) are tried again with backoff, and nothing is
    tried again once `deadline_s` seconds have passed since this registry was first asked.
    """

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        attempts: int,
        backoff_s: float,
        deadline_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.sleep = sleep
        self.clock = clock
        self.deadline_at = clock() + deadline_s if deadline_s is not None else None

    def _left_s(self) -> float | None:
        return None if self.deadline_at is None else max(0.0, self.deadline_at - self.clock())

    def manifest(self, reference: str) -> RemoteManifest | None:
        """What the registry holds under `reference`; None when the tag is absent."""
        auth = registry_auth(split_reference(reference)[0])
        backoff = Backoff(self.attempts, self.backoff_s, self._left_s(), self.clock)
        attempt = 0
        while True:
            attempt += 1
            try:
                return remote_manifest(reference, auth)
            except RegistryError as exc:
                delay = backoff.delay_after(attempt) if exc.transient else None
                if delay is None:
                    if exc.transient:
                        raise RegistryError(
                            f"{exc.message} ({attempt} tries in {backoff.elapsed_s():.0f}s)",
                            exc.hint,
                        ) from None
                    raise
                self.sleep(delay)

    def push(self, reference: str) -> PushOutcome:
        """Push the local `reference`, retrying transient failures."""
        return push(
            self.client,
            reference,
            attempts=self.attempts,
            backoff_s=self.backoff_s,
            sleep=self.sleep,
            auth=registry_auth(split_reference(reference)[0]),
            deadline_s=self._left_s(),
            clock=self.clock,
        )
