"""Adapter: pushing tags through the Docker SDK and reading digests back from the registry.

docker-py's push never raises for a failed push: the failure is an `error` /
`errorDetail` item inside the stream, so the whole stream is read. Transient
failures are retried with backoff a bounded number of times; permanent ones are
not. Credentials come from the Docker config or the environment and are never
written to logs or results.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import docker.errors
import requests.exceptions

from imagekit.adapters.engine import DockerEngine, engine_errors
from imagekit.adapters.pushstream import push_within
from imagekit.errors import InputError, RegistryError
from imagekit.kernel.json import JsonObject, as_object
from imagekit.kernel.reference import DOCKER_HUB_HOSTS, LEGACY_DOCKER_HUB, ImageReference, parse
from imagekit.kernel.retry import Backoff
from imagekit.kernel.vocabulary import PushFailure
from imagekit.publish.ports import ManifestDocument, PushOutcome, RemoteManifest

T = TypeVar("T")
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


def _scheme(host: str) -> str:
    plain = host.startswith(("127.", "localhost", "[::1]"))
    return "http" if plain else "https"


def _url(ref: ImageReference, kind: str, name: str) -> str:
    """The registry API URL of `ref`'s manifest or blob `name` (`kind`: manifests, blobs)."""
    host = ref.api_host
    return f"{_scheme(host)}://{host}/v2/{ref.repository}/{kind}/{name}"


def _request(
    url: str,
    auth: dict[str, str] | None,
    method: str = "GET",
    body: bytes | None = None,
    content_type: str | None = None,
    bearer: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method=method)
    request.add_header("Accept", MANIFEST_TYPES)
    if content_type:
        request.add_header("Content-Type", content_type)
    if bearer:
        request.add_header("Authorization", f"Bearer {bearer}")
    elif auth:
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


def _call(
    url: str,
    host: str,
    auth: dict[str, str] | None,
    method: str = "GET",
    body: bytes | None = None,
    content_type: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One registry API call, answering a Bearer challenge once; RegistryError when
    unreachable (transient unless the connection was refused: nothing listens there, and
    waiting will not help)."""
    try:
        status, headers, answer = _request(url, auth, method, body, content_type)
        if status == 401 and "Bearer" in headers.get("Www-Authenticate", ""):
            token = _bearer(headers["Www-Authenticate"], auth)
            if token:
                status, headers, answer = _request(url, None, method, body, content_type, token)
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
    return status, headers, answer


def _refusal(status: int, host: str, what: str) -> RegistryError:
    """What a registry answer that is neither success nor "absent" means."""
    if status in (401, 403):
        return RegistryError(
            f"registry {host} asks for credentials ({status}) for {what}",
            f"log in first: docker login {host}",
        )
    return RegistryError(
        f"registry {host} answered {status} for {what}",
        "the registry failed; try again later, or see its log",
        transient=status >= 500 or status == 429,
    )


def remote_document(reference: str, auth: dict[str, str] | None = None) -> ManifestDocument | None:
    """The manifest (or index) a tag or digest names, byte for byte; None if absent."""
    ref = parse(reference)
    status, headers, body = _call(_url(ref, "manifests", ref.reference_in_api), ref.registry, auth)
    if status == 404:
        return None
    if status != 200:
        raise _refusal(status, ref.registry, ref.familiar)
    lowered = {k.lower(): v for k, v in headers.items()}
    digest = lowered.get("docker-content-digest") or "sha256:" + hashlib.sha256(body).hexdigest()
    data = json.loads(body)
    media_type = str(data.get("mediaType") or lowered.get("content-type", "")).split(";")[0]
    children = tuple(
        (str(m["digest"]), _platform(m.get("platform") or {})) for m in data.get("manifests") or ()
    )
    config = str((data.get("config") or {}).get("digest", ""))
    return ManifestDocument(media_type, body, digest, config, children)


def _platform(platform: JsonObject) -> str:
    """`linux/amd64`, `linux/arm64/v8`; `unknown/unknown` marks an attestation manifest."""
    said = [platform.get("os", "unknown"), platform.get("architecture", "unknown")]
    return "/".join(map(str, said + ([platform["variant"]] if platform.get("variant") else [])))


def put_document(
    reference: str, document: ManifestDocument, auth: dict[str, str] | None = None
) -> str:
    """Put `document`, unchanged, under the tag `reference` names; the digest the registry
    gives it (the same as the document's: the bytes are the same)."""
    ref = parse(reference)
    url = _url(ref, "manifests", ref.reference_in_api)
    status, headers, _ = _call(url, ref.registry, auth, "PUT", document.body, document.media_type)
    if status not in (200, 201):
        raise _refusal(status, ref.registry, f"putting {ref.familiar}")
    lowered = {k.lower(): v for k, v in headers.items()}
    return lowered.get("docker-content-digest") or document.digest


def remote_manifest(reference: str, auth: dict[str, str] | None = None) -> RemoteManifest | None:
    """The registry's digest and config digest (= image id) for a tag; None if absent."""
    document = remote_document(reference, auth)
    return None if document is None else RemoteManifest(document.digest, document.config)


def remote_config(
    reference: str, auth: dict[str, str] | None = None, platform: str | None = None
) -> JsonObject | None:
    """The image config (its `config.Labels`, `config.Env`) of a tag, read from the registry
    without pulling a layer; None when the tag is absent. For an index (`ubuntu:22.04` is
    one), the config of its image for `platform` (`linux/arm64`), else of its first image."""
    ref = parse(reference)
    document = remote_document(reference, auth)
    if document is not None and document.is_index:
        child = _image_for(document, platform)
        document = None if child is None else remote_document(f"{ref.name}@{child}", auth)
    if document is None or not document.config:
        return None
    status, _, body = _call(_url(ref, "blobs", document.config), ref.registry, auth)
    if status != 200:
        what = f"the config of {reference}"
        raise RegistryError(f"registry {ref.registry} answered {status} for {what}")
    return as_object(json.loads(body))


def _image_for(index: ManifestDocument, platform: str | None) -> str | None:
    """The digest of the image an index holds for `platform` (os/architecture compared;
    any image when None); None when it holds none."""
    wanted = None if platform is None else platform.split("/")[:2]
    found = (d for d, p in index.images() if wanted is None or p.split("/")[:2] == wanted)
    return next(found, None)


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
