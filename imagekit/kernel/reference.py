"""Image references as Docker reads them. Pure.

One grammar for every command that names an image: `ubuntu` is
`docker.io/library/ubuntu:latest`, `pytorch/pytorch:2.7.0` is on Docker Hub too, and the first
component names a registry host only when it has a `.` or a `:` or is `localhost`
(`nvcr.io/nvidia/pytorch`, `127.0.0.1:5000/team/x`, `localhost/x`). This follows the
distribution/reference grammar (regexp.go, normalize.go) that the Docker CLI and engine use,
with one deliberate difference: an uppercase first component is refused here, where Docker
would now take it for a host name; a typo should get a clear error, not "cannot reach UPPER".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from imagekit.errors import InputError

DOCKER_HUB = "docker.io"
# Where Docker Hub's registry API answers: docker.io itself only redirects to the website.
DOCKER_HUB_API = "registry-1.docker.io"
# The "Docker Index" name, still accepted (and canonicalised to docker.io) by Docker.
LEGACY_DOCKER_HUB = "index.docker.io"
# Every name Docker Hub goes by: as references name it, its API host, its legacy name.
DOCKER_HUB_HOSTS = (DOCKER_HUB, DOCKER_HUB_API, LEGACY_DOCKER_HUB)
OFFICIAL_NAMESPACE = "library/"
DEFAULT_TAG = "latest"
MAX_REPOSITORY_LENGTH = 255

_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
# Go's \w is ASCII; Python's is not, so the classes are spelled out.
TAG_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
PATH_RE = re.compile(rf"^{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*$")
HOST_RE = re.compile(rf"^{_HOST}$")
TAG_RE = re.compile(rf"^{TAG_PATTERN}$")
DIGEST_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$")
# The algorithms the engine knows (go-digest), with the length of their lowercase hex.
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
IMAGE_ID_RE = re.compile(r"^[a-f0-9]{64}$")

HINT = (
    "write [registry/]repository[:tag][@sha256:digest] as Docker does, e.g. ubuntu:22.04, "
    "pytorch/pytorch:2.7.0-cuda12.8-cudnn9-runtime or nvcr.io/nvidia/pytorch:25.01-py3"
)


def has_registry_host(component: str) -> bool:
    """Whether the first component of a name is a registry host rather than a Docker Hub
    namespace: it has a `.` (a domain, an IPv4 address) or a `:` (a port, IPv6), or is
    `localhost`."""
    return "." in component or ":" in component or component == "localhost"


def split_domain(name: str) -> tuple[str, str]:
    """(registry, repository) of a name without tag or digest, with Docker's defaults:
    `ubuntu` -> ("docker.io", "library/ubuntu"), `a/b` -> ("docker.io", "a/b")."""
    first, slash, rest = name.partition("/")
    if slash and has_registry_host(first):
        registry, repository = (DOCKER_HUB if first == LEGACY_DOCKER_HUB else first), rest
    else:
        registry, repository = DOCKER_HUB, name
    if registry == DOCKER_HUB and "/" not in repository:
        repository = OFFICIAL_NAMESPACE + repository
    return registry, repository


@dataclass(frozen=True)
class ImageReference:
    """One image reference, normalised: registry and repository always set, and a tag
    (`latest` when none was written and no digest either) and/or a digest."""

    registry: str
    repository: str
    tag: str = ""
    digest: str = ""

    @property
    def name(self) -> str:
        """The canonical name, without tag or digest: `docker.io/library/ubuntu`."""
        return f"{self.registry}/{self.repository}"

    @property
    def familiar_name(self) -> str:
        """The name as `docker images` shows it: `ubuntu`, `pytorch/pytorch`, `nvcr.io/x/y`."""
        if self.registry != DOCKER_HUB:
            return self.name
        official = self.repository.removeprefix(OFFICIAL_NAMESPACE)
        if official != self.repository and "/" not in official:
            return official
        return self.repository

    @property
    def familiar(self) -> str:
        """The whole reference as `docker images` shows it: `ubuntu:22.04`."""
        return self.familiar_name + self._suffix()

    @property
    def api_host(self) -> str:
        """The host whose registry HTTP API holds this image (`registry-1.docker.io` for
        Docker Hub, the registry as written otherwise)."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def reference_in_api(self) -> str:
        """What the registry API's manifest calls take: the digest when there is one (it
        names the content exactly), else the tag."""
        return self.digest or self.tag

    def _suffix(self) -> str:
        return (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")

    def __str__(self) -> str:
        """The canonical full form: `docker.io/library/ubuntu:22.04`."""
        return self.name + self._suffix()


def _refuse(text: str, why: str) -> InputError:
    return InputError(f"image reference {text!r} is not valid: {why}", HINT)


def _digest_problem(digest: str) -> str | None:
    """None when `digest` is one the engine accepts; else what is wrong with it."""
    if not DIGEST_RE.match(digest):
        return f"digest {digest!r} is not algorithm:hex (e.g. sha256:<64 hex digits>)"
    algorithm, _, hex_part = digest.partition(":")
    length = DIGEST_HEX_LENGTHS.get(algorithm)
    if length is None:
        return f"digest algorithm {algorithm!r} is not one of {', '.join(DIGEST_HEX_LENGTHS)}"
    if len(hex_part) != length or hex_part != hex_part.lower():
        return f"a {algorithm} digest is {length} lowercase hex digits, not {hex_part!r}"
    return None


def _tag_problem(tag: str) -> str | None:
    """None when `tag` is a valid Docker tag; else what is wrong with it."""
    if not tag:
        return "the tag after ':' is empty"
    if len(tag) > 128:
        return f"the tag is {len(tag)} characters long; Docker allows at most 128"
    if not TAG_RE.match(tag):
        return f"tag {tag!r} may hold only letters, digits, '_', '.' and '-' (not first)"
    return None


def _name_problem(name: str, registry: str, repository: str) -> str | None:
    """None when the name parts are valid; else what is wrong with them."""
    if not name:
        return "it has no repository name"
    if IMAGE_ID_RE.match(name):
        return "a 64-hex-digit string is an image id, not a repository name"
    if not HOST_RE.match(registry):
        return f"{registry!r} is not a registry host"
    if repository != repository.lower():
        return f"repository {repository!r} must be lowercase"
    if not PATH_RE.match(repository):
        return (
            f"repository {repository!r} may hold only lowercase letters, digits and single "
            "'.', '_', '__' or '-' runs between them, in '/'-separated components"
        )
    if len(repository) > MAX_REPOSITORY_LENGTH:
        return f"the repository name is longer than {MAX_REPOSITORY_LENGTH} characters"
    return None


def parse(text: str) -> ImageReference:
    """The reference `text` names, normalised as Docker normalises it; InputError (naming
    the reference, with a hint) when Docker would refuse it."""
    rest, at, digest = text.partition("@")
    if at and (problem := _digest_problem(digest)) is not None:
        raise _refuse(text, problem)
    name, tag = rest, ""
    colon = rest.rfind(":")
    if colon > rest.rfind("/"):  # a ':' after the last '/' starts the tag, not a port
        name, tag = rest[:colon], rest[colon + 1 :]
        if (problem := _tag_problem(tag)) is not None:
            raise _refuse(text, problem)
    registry, repository = split_domain(name) if name else ("", "")
    if (problem := _name_problem(name, registry, repository)) is not None:
        raise _refuse(text, problem)
    return ImageReference(registry, repository, tag or ("" if digest else DEFAULT_TAG), digest)


def record_name(reference: str) -> str:
    """A file-safe record name for an image named on the command line."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", reference.split("/")[-1]).strip("_") or "image"
