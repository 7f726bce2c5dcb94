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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import docker.errors
import requests.exceptions

from imagekit.adapters.engine import DockerEngine, engine_errors
from imagekit.adapters.pushstream import push_within
from imagekit.adapters.registry_api import (
    put_document,
    remote_document,
    remote_manifest,
    remote_tags,
)
from imagekit.errors import InputError, RegistryError
from imagekit.kernel.reference import DOCKER_HUB_HOSTS, LEGACY_DOCKER_HUB, parse
from imagekit.kernel.retry import Backoff
from imagekit.kernel.vocabulary import PushFailure
from imagekit.publish.ports import ManifestDocument, PushOutcome, RemoteManifest

T = TypeVar("T")
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


def classify(message: str) -> PushFailure:
    """Whether retrying a push that failed this way can help: only where it looks transient
    and not permanent."""
    if PERMANENT.search(message) or not TRANSIENT.search(message):
        return PushFailure.PERMANENT
    return PushFailure.TRANSIENT


def split_reference(reference: str) -> tuple[str, str, str]:
    """("127.0.0.1:5000", "team/pytorch", "tag") from a reference: the host of its registry
    API (`registry-1.docker.io` for `ubuntu:22.04`), the repository there (`library/ubuntu`),
    and the digest, else the tag, as that API takes them. InputError for a bad reference."""
    ref = parse(reference)
    return ref.api_host, ref.repository, ref.reference_in_api


# The key `docker login` files Docker Hub's credentials under in ~/.docker/config.json.
DOCKER_HUB_AUTH_KEY = "https://index.docker.io/v1/"


def auth_keys(host: str) -> tuple[str, ...]:
    """The keys the Docker config may hold `host`'s credentials under, most likely first:
    Docker Hub's (as docker.io, its API host or its legacy name) under the v1 index URL."""
    if host in DOCKER_HUB_HOSTS:
        return (DOCKER_HUB_AUTH_KEY, *DOCKER_HUB_HOSTS, f"https://{LEGACY_DOCKER_HUB}")
    return (host, f"https://{host}", f"http://{host}")


def registry_auth(host: str, environ: dict[str, str] | None = None) -> dict[str, str] | None:
    """Credentials for `host` (a registry as a reference names it, or its API host):
    IMAGEKIT_REGISTRY_USER/PASSWORD, else the Docker config's."""
    env = os.environ if environ is None else environ
    user, password = env.get("IMAGEKIT_REGISTRY_USER"), env.get("IMAGEKIT_REGISTRY_PASSWORD")
    if user and password:
        return {"username": user, "password": password}
    config = Path(env.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        auths = json.loads(config.read_text()).get("auths", {})
    except (OSError, json.JSONDecodeError):
        return None
    entry: dict[str, str] = next(
        (auths[k] for k in auth_keys(host) if "auth" in auths.get(k, {})), {}
    )
    if "auth" in entry:
        user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        return {"username": user, "password": password}
    return None


def _push_once(
    engine: DockerEngine,
    repository: str,
    tag: str,
    auth: Mapping[str, str] | None,
    left_s: float | None,
) -> str | None:
    """One push, within `left_s` seconds when given; None when it worked, else the error the
    stream (or the engine) reported, or the deadline that stopped it."""
    with engine_errors(f"pushing {repository}:{tag}"):
        try:
            return push_within(engine, repository, tag, auth, left_s)
        except docker.errors.APIError as exc:
            return str(exc.explanation or exc)
        except requests.exceptions.RequestException as exc:
            return f"connection to the engine failed: {exc}"


def push(
    engine: DockerEngine,
    reference: str,
    *,
    attempts: int = 4,
    backoff_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    auth: Mapping[str, str] | None = None,
    deadline_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> PushOutcome:
    """Push `reference`, retrying transient failures with exponential backoff, within
    `deadline_s` seconds in all when given: a push still running then is cancelled."""
    ref = parse(reference)
    if not ref.tag:
        raise InputError(f"cannot push {reference}: it names a digest, not a tag", "push a tag")
    repository, tag = ref.familiar_name, ref.tag  # the name as the engine shows it
    errors: list[str] = []
    backoff = Backoff(attempts, backoff_s, deadline_s, clock)
    attempt = 0
    while True:
        attempt += 1
        left_s = None if deadline_s is None else max(1.0, deadline_s - backoff.elapsed_s())
        error = _push_once(engine, repository, tag, auth, left_s)
        if error is None:
            return PushOutcome(True, attempt, errors=tuple(errors))
        errors.append(error)
        kind = classify(error)
        delay = None if kind == PushFailure.PERMANENT else backoff.delay_after(attempt)
        if delay is None:
            if kind == PushFailure.TRANSIENT and attempt < attempts:
                error += f" (gave up: the {deadline_s:g}s publish deadline would pass)"
            return PushOutcome(False, attempt, error=error, kind=kind, errors=tuple(errors))
        sleep(delay)


class HttpRegistry:
    """The `Registry` port: manifests over the registry HTTP API, pushes through the engine.

    Credentials come from the Docker config of the host each reference names. Transient
    failures (5xx, 429, a dropped connection) are tried again with backoff, and nothing is
    tried again once `deadline_s` seconds have passed since this registry was first asked.
    """

    def __init__(
        self,
        engine: DockerEngine | None,
        *,
        attempts: int,
        backoff_s: float,
        deadline_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.sleep = sleep
        self.clock = clock
        self.deadline_at = clock() + deadline_s if deadline_s is not None else None

    def _left_s(self) -> float | None:
        return None if self.deadline_at is None else max(0.0, self.deadline_at - self.clock())

    def _retrying(self, call: Callable[[], T]) -> T:
        """`call`, tried again after a transient RegistryError while tries and time last."""
        backoff = Backoff(self.attempts, self.backoff_s, self._left_s(), self.clock)
        attempt = 0
        while True:
            attempt += 1
            try:
                return call()
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

    def _auth(self, reference: str) -> dict[str, str] | None:
        return registry_auth(parse(reference).registry)

    def manifest(self, reference: str) -> RemoteManifest | None:
        """What the registry holds under `reference`; None when the tag is absent."""
        return self._retrying(lambda: remote_manifest(reference, self._auth(reference)))

    def document(self, reference: str) -> ManifestDocument | None:
        """The manifest or index `reference` names, byte for byte; None when absent."""
        return self._retrying(lambda: remote_document(reference, self._auth(reference)))

    def put(self, reference: str, document: ManifestDocument) -> str:
        """Put `document` under the tag `reference` names, unchanged; its digest there."""
        return self._retrying(lambda: put_document(reference, document, self._auth(reference)))

    def list_tags(self, repository: str) -> tuple[str, ...]:
        """Every tag of `repository`; () when it has none."""
        return self._retrying(lambda: remote_tags(repository, self._auth(f"{repository}:x")))

    def push(self, reference: str) -> PushOutcome:
        """Push the local `reference`, retrying transient failures."""
        if self.engine is None:
            raise ValueError("pushing needs an engine; this registry was made without one")
        return push(
            self.engine,
            reference,
            attempts=self.attempts,
            backoff_s=self.backoff_s,
            sleep=self.sleep,
            auth=registry_auth(parse(reference).registry),
            deadline_s=self._left_s(),
            clock=self.clock,
        )
