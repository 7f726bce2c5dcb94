"""Image references read as Docker reads them (imagekit.kernel.reference), and the registry
adapter built on them: Docker Hub names go to Docker Hub's API with Docker Hub's credentials."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.registry import auth_keys, registry_auth, split_reference
from imagekit.adapters.registry_api import remote_config
from imagekit.errors import InputError
from imagekit.kernel.reference import ImageReference, has_registry_host, parse
from imagekit.matrix.plan import retarget

DIGEST = "sha256:" + "0123456789abcdef" * 4
HUB = "docker.io"


@pytest.mark.parametrize(
    "text,registry,repository,tag,digest",
    [
        ("ubuntu", HUB, "library/ubuntu", "latest", ""),
        ("ubuntu:22.04", HUB, "library/ubuntu", "22.04", ""),
        ("pytorch/pytorch:latest", HUB, "pytorch/pytorch", "latest", ""),
        (
            "pytorch/pytorch:2.7.0-cuda12.8-cudnn9-runtime",
            HUB,
            "pytorch/pytorch",
            "2.7.0-cuda12.8-cudnn9-runtime",
            "",
        ),
        ("imagekit-demo/pytorch", HUB, "imagekit-demo/pytorch", "latest", ""),
        ("nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io", "nvidia/pytorch", "25.01-py3", ""),
        ("localhost:5000/x", "localhost:5000", "x", "latest", ""),
        ("localhost/x", "localhost", "x", "latest", ""),
        ("127.0.0.1:5000/team/pytorch:tag", "127.0.0.1:5000", "team/pytorch", "tag", ""),
        ("[::1]:5000/x:t", "[::1]:5000", "x", "t", ""),
        ("example.com/a/b/c:1", "example.com", "a/b/c", "1", ""),
        ("docker.io/ubuntu", HUB, "library/ubuntu", "latest", ""),
        ("index.docker.io/library/ubuntu:22.04", HUB, "library/ubuntu", "22.04", ""),
        ("docker.io/library/ubuntu:22.04", HUB, "library/ubuntu", "22.04", ""),
        # `localhost` with no path is a Docker Hub name, as in Docker.
        ("localhost", HUB, "library/localhost", "latest", ""),
        ("a@" + DIGEST, HUB, "library/a", "", DIGEST),
        ("a:tag@" + DIGEST, HUB, "library/a", "tag", DIGEST),
        ("ghcr.io/acme/x@" + DIGEST, "ghcr.io", "acme/x", "", DIGEST),
        ("a__b-c---d/e.f_g:T_a.g-1", HUB, "a__b-c---d/e.f_g", "T_a.g-1", ""),
        ("a:" + "t" * 128, HUB, "library/a", "t" * 128, ""),
    ],
)
def test_references_are_normalised_as_docker_does(
    text: str, registry: str, repository: str, tag: str, digest: str
) -> None:
    assert parse(text) == ImageReference(registry, repository, tag, digest)


@pytest.mark.parametrize(
    "text,why",
    [
        ("", "no repository name"),
        (":tag", "no repository name"),
        ("@" + DIGEST, "no repository name"),
        ("x:", "tag after ':' is empty"),
        ("x:" + "t" * 129, "129 characters long"),
        ("x:-tag", "may hold only"),
        ("x:t/a", "not a registry host"),  # a `:` before a `/` is a port
        ("UPPER/case", "must be lowercase"),
        ("Ubuntu", "must be lowercase"),
        ("example.com/Team/x", "must be lowercase"),
        ("a//b", "may hold only"),
        ("a/b/", "may hold only"),
        ("-a", "may hold only"),
        ("a..b", "may hold only"),
        ("a b", "may hold only"),
        ("a@sha256:abc", "not algorithm:hex"),
        ("a@sha256:" + "A" * 64, "64 lowercase hex"),
        ("a@sha256:" + "0" * 63, "64 lowercase hex"),
        ("a@md5:" + "0" * 32, "not one of"),
        ("a@", "not algorithm:hex"),
        ("0123456789abcdef" * 4, "image id"),
        ("exa_mple.com/x", "not a registry host"),
        ("a__b.c/x", "not a registry host"),  # a `.` makes it a host, as in Docker
        ("a/" + "b" * 260, "longer than 255"),
    ],
)
def test_references_docker_refuses_are_refused_with_a_hint(text: str, why: str) -> None:
    with pytest.raises(InputError) as caught:
        parse(text)
    assert repr(text) in caught.value.message and why in caught.value.message
    assert "ubuntu:22.04" in caught.value.hint


@pytest.mark.parametrize(
    "text,familiar,canonical",
    [
        ("ubuntu", "ubuntu:latest", "docker.io/library/ubuntu:latest"),
        ("ubuntu:22.04", "ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("docker.io/library/ubuntu:22.04", "ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
        ("pytorch/pytorch:2.7.0", "pytorch/pytorch:2.7.0", "docker.io/pytorch/pytorch:2.7.0"),
        # Only a one-component official name drops `library/` (nested ones are not official).
        ("library/a/b", "library/a/b:latest", "docker.io/library/a/b:latest"),
        ("nvcr.io/nvidia/pytorch:25.01-py3", *["nvcr.io/nvidia/pytorch:25.01-py3"] * 2),
        ("localhost:5000/x", "localhost:5000/x:latest", "localhost:5000/x:latest"),
        ("a@" + DIGEST, "a@" + DIGEST, "docker.io/library/a@" + DIGEST),
        ("a:t@" + DIGEST, "a:t@" + DIGEST, "docker.io/library/a:t@" + DIGEST),
    ],
)
def test_familiar_and_canonical_forms(text: str, familiar: str, canonical: str) -> None:
    ref = parse(text)
    assert ref.familiar == familiar and str(ref) == canonical
    assert parse(str(ref)) == ref and parse(ref.familiar) == ref


@pytest.mark.parametrize(
    "text,expected",
    [
        ("ubuntu:22.04", ("registry-1.docker.io", "library/ubuntu", "22.04")),
        ("pytorch/pytorch:latest", ("registry-1.docker.io", "pytorch/pytorch", "latest")),
        ("imagekit-demo/pytorch", ("registry-1.docker.io", "imagekit-demo/pytorch", "latest")),
        ("127.0.0.1:5000/team/pytorch:tag", ("127.0.0.1:5000", "team/pytorch", "tag")),
        ("localhost:5000/x", ("localhost:5000", "x", "latest")),
        ("nvcr.io/nvidia/pytorch:25.01-py3", ("nvcr.io", "nvidia/pytorch", "25.01-py3")),
        ("r.example/a:t@" + DIGEST, ("r.example", "a", DIGEST)),  # the digest names content
    ],
)
def test_the_registry_api_is_asked_on_the_host_that_holds_the_image(
    text: str, expected: tuple[str, str, str]
) -> None:
    assert split_reference(text) == expected


def test_split_reference_refuses_what_docker_refuses() -> None:
    with pytest.raises(InputError):
        split_reference("UPPER/case")


def write_config(folder: Path, key: str) -> dict[str, str]:
    (folder / "config.json").write_text(f'{{"auths": {{"{key}": {{"auth": "YWxpY2U6czNjcmV0"}}}}}}')
    return {"DOCKER_CONFIG": str(folder)}


@pytest.mark.parametrize("host", ["docker.io", "registry-1.docker.io", "index.docker.io"])
@pytest.mark.parametrize(
    "key", ["https://index.docker.io/v1/", "docker.io", "index.docker.io", "registry-1.docker.io"]
)
def test_docker_hub_credentials_are_found_under_the_key_docker_login_files_them(
    tmp_path: Path, host: str, key: str
) -> None:
    env = write_config(tmp_path, key)
    assert registry_auth(host, env) == {"username": "alice", "password": "s3cret"}
    assert registry_auth(parse("ubuntu").registry, env) is not None


def test_credentials_of_other_registries_stay_theirs(tmp_path: Path) -> None:
    env = write_config(tmp_path, "https://index.docker.io/v1/")
    assert registry_auth("ghcr.io", env) is None
    assert registry_auth("ghcr.io", write_config(tmp_path, "https://ghcr.io")) is not None
    assert auth_keys("ghcr.io")[0] == "ghcr.io"


def test_an_entry_without_auth_is_passed_over_for_one_with_it(tmp_path: Path) -> None:
    # A credential store leaves `{}` under the v1 URL; a plain `auth` may sit under another key.
    (tmp_path / "config.json").write_text(
        '{"auths": {"https://index.docker.io/v1/": {}, "docker.io": {"auth": "YWxpY2U6czNjcmV0"}}}'
    )
    assert registry_auth("docker.io", {"DOCKER_CONFIG": str(tmp_path)}) is not None


@pytest.mark.parametrize(
    "component,is_host",
    [
        ("ubuntu", False),
        ("pytorch", False),
        ("imagekit-demo", False),
        ("localhost", True),
        ("nvcr.io", True),
        ("127.0.0.1", True),
        ("registry:5000", True),
        ("[::1]", True),
    ],
)
def test_the_first_component_is_a_host_by_dot_colon_or_localhost(
    component: str, is_host: bool
) -> None:
    assert has_registry_host(component) is is_host


@pytest.mark.parametrize(
    "repository,expected",
    [
        ("ubuntu", "127.0.0.1:5000/ubuntu"),
        ("localhost/x", "127.0.0.1:5000/x"),
        ("pytorch/pytorch", "127.0.0.1:5000/pytorch/pytorch"),
    ],
)
def test_retarget_keeps_the_namespace_of_a_docker_hub_name(repository: str, expected: str) -> None:
    assert retarget(repository, "127.0.0.1:5000") == expected


AMD, ARM, CONFIG = ("sha256:" + c * 64 for c in "abc")


class IndexRegistry(BaseHTTPRequestHandler):
    """A registry holding `x:multi`, an index of an amd64 and an arm64 image (and an
    attestation manifest); only the arm64 image has a config, whose label says so."""

    documents: ClassVar[dict[str, dict[str, Any]]] = {
        "/v2/x/manifests/multi": {
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "digest": "sha256:" + "e" * 64,
                    "platform": {"os": "unknown", "architecture": "unknown"},
                },
                {"digest": AMD, "platform": {"os": "linux", "architecture": "amd64"}},
                {
                    "digest": ARM,
                    "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"},
                },
            ],
        },
        f"/v2/x/manifests/{ARM}": {"config": {"digest": CONFIG}},
        f"/v2/x/manifests/{AMD}": {"config": {"digest": "sha256:" + "f" * 64}},
        f"/v2/x/blobs/{CONFIG}": {"config": {"Labels": {"arch": "arm64"}}},
    }

    def do_GET(self) -> None:
        document = self.documents.get(self.path)
        body = json.dumps(document or {}).encode()
        self.send_response(200 if document else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def index_registry() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), IndexRegistry)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_config_of_an_index_is_its_image_for_the_platform_asked(index_registry: str) -> None:
    config = remote_config(f"{index_registry}/x:multi", platform="linux/arm64")
    assert config == {"config": {"Labels": {"arch": "arm64"}}}
    assert remote_config(f"{index_registry}/x:multi", platform="linux/s390x") is None
    assert remote_config(f"{index_registry}/x:absent") is None


class PullClient:
    """A docker client that records what it is asked to pull."""

    def __init__(self) -> None:
        self.api = self
        self.pulls: list[tuple[str, str]] = []

    def pull(self, name: str, tag: str, **options: Any) -> Iterator[dict[str, str]]:
        self.pulls.append((name, tag))
        return iter([{"status": "done"}])


@pytest.mark.parametrize(
    "reference,asked",
    [
        ("ubuntu", ("ubuntu", "latest")),
        ("docker.io/library/ubuntu:22.04", ("ubuntu", "22.04")),
        ("localhost:5000/x", ("localhost:5000/x", "latest")),
        ("nvcr.io/nvidia/pytorch:25.01-py3@" + DIGEST, ("nvcr.io/nvidia/pytorch", DIGEST)),
    ],
)
def test_a_pull_asks_the_engine_for_the_name_and_the_tag_or_digest(
    reference: str, asked: tuple[str, str]
) -> None:
    client = PullClient()
    assert DockerEngine(client).pull(reference) == ""  # type: ignore[arg-type]
    assert client.pulls == [asked]
