"""Adapter: the registry HTTP API (distribution spec v2): manifests and indexes read and put
byte for byte, image configs read without pulling a layer, a repository's tags listed. Each call
answers a Bearer challenge once; what cannot be reached is a RegistryError, transient unless
nothing listens there."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request

from imagekit.errors import RegistryError
from imagekit.kernel.json import JsonObject, as_object
from imagekit.kernel.reference import ImageReference, parse
from imagekit.publish.ports import ManifestDocument, RemoteManifest

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


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


def remote_tags(repository: str, auth: dict[str, str] | None = None) -> tuple[str, ...]:
    """Every tag of `repository` (`registry/name`), following the registry's pages (its `Link`
    header); () when the repository does not exist yet."""
    ref = parse(f"{repository}:latest")
    url: str | None = _url(ref, "tags", "list") + "?n=1000"
    found: list[str] = []
    while url is not None:
        status, headers, body = _call(url, ref.registry, auth)
        if status == 404:
            return ()
        if status != 200:
            raise _refusal(status, ref.registry, f"the tags of {repository}")
        found += [str(t) for t in json.loads(body).get("tags") or ()]
        link = {k.lower(): v for k, v in headers.items()}.get("link", "")
        following = re.match(r"\s*<([^>]+)>", link)
        url = urllib.parse.urljoin(url, following.group(1)) if following else None
    return tuple(found)


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
