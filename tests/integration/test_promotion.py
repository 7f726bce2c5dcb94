"""Candidates and their promotion inside a real registry (Debian's docker-registry)."""

from __future__ import annotations

import hashlib
import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from imagekit.adapters.registry_api import MANIFEST_TYPES
from tests.integration.conftest import DemoBuild, imagekit
from tests.integration.proxies import FaultyProxy
from tests.integration.test_publish import (  # noqa: F401 - `registry` is a fixture
    ALIAS,
    SLIM,
    SLIM_TAG,
    registry,
)

CANDIDATE = "4242"
NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


def publish(
    demo_build: DemoBuild,
    where: str,
    *args: str,
    results: Path | None = None,
    env: dict[str, str] | None = None,
):
    """`imagekit publish` of the demo slim to the registry `where` (with `env` added);
    promotions with no engine."""
    return imagekit(
        "publish",
        "--matrix",
        str(demo_build.matrix),
        "--only",
        SLIM,
        "--registry",
        where,
        "--results",
        str(results or demo_build.results),
        "--json",
        *args,
        env={**(env or {}), **(NO_ENGINE if "--from-candidate" in args else {})},
    )


def api(url: str, method: str = "GET", body: bytes | None = None, content_type: str = ""):
    headers = {"Accept": MANIFEST_TYPES}
    if content_type:
        headers["Content-Type"] = content_type
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.headers, response.read()


def repository_of(tag_reference: str) -> tuple[str, str]:
    """(host, path) of `host/path:tag`."""
    host, _, rest = tag_reference.partition("/")
    return host, rest.rpartition(":")[0]


def digest_of(host: str, path: str, tag: str) -> str | None:
    try:
        headers, _ = api(f"http://{host}/v2/{path}/manifests/{tag}", "HEAD")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise
    return str(headers["Docker-Content-Digest"])


@pytest.fixture(scope="module")
def candidate(demo_verify: dict, demo_build: DemoBuild, registry: str) -> dict:  # noqa: F811
    """The verified demo slim, pushed as a candidate and nothing else."""
    result = publish(demo_build, registry, "--candidate", CANDIDATE)
    assert result.code == 0, result.stderr[-3000:]
    return json.loads(result.stdout)["images"][0]


def test_a_candidate_run_pushes_exactly_the_candidate_tag(
    candidate: dict,
    registry: str,  # noqa: F811
) -> None:
    assert candidate["status"] == "published"
    [tag] = candidate["tags"]
    assert tag["kind"] == "candidate" and tag["tag"].endswith(f"{SLIM_TAG}-candidate-{CANDIDATE}")
    host, path = repository_of(tag["tag"])
    _, body = api(f"http://{host}/v2/{path}/tags/list")
    assert json.loads(body)["tags"] == [f"{SLIM_TAG}-candidate-{CANDIDATE}"]
    assert tag["digest"] == digest_of(host, path, f"{SLIM_TAG}-candidate-{CANDIDATE}")


def _edited_results(demo_build: DemoBuild, tmp_path: Path, change) -> Path:
    """A copy of the demo's results with every slim verify record passed through `change`."""
    results = tmp_path / "results"
    shutil.copytree(demo_build.results, results)
    for path in results.glob(f"*/images/*{SLIM}*.json"):
        record = json.loads(path.read_text())
        if "verify" in record:
            change(record["verify"])
            path.write_text(json.dumps(record))
    return results


def _fail_autograd(verify: dict) -> None:
    for probe in verify["probes"]:
        if probe["probe"] == "autograd":
            probe["status"] = "fail"
            probe["checks"] = [{"name": "dy/dx", "ok": False, "detail": "expected 3, saw 4"}]
    verify["status"] = "fail"


def _other_image(verify: dict) -> None:
    verify["image_id"] = "sha256:" + "0" * 64


@pytest.mark.parametrize(
    "change,reason",
    [
        (None, "no verify results for image"),
        (_fail_autograd, "autograd fail"),
        (_other_image, "belong to other image ids"),
    ],
    ids=["no record", "a failed record", "a record of other content"],
)
def test_a_promotion_without_a_passing_record_for_the_candidates_image_is_refused(
    candidate: dict,
    demo_build: DemoBuild,
    registry: str,  # noqa: F811
    tmp_path: Path,
    change,
    reason: str,
) -> None:
    if change is None:
        (results := tmp_path / "empty").mkdir()
    else:
        results = _edited_results(demo_build, tmp_path, change)
    result = publish(demo_build, registry, "--from-candidate", CANDIDATE, results=results)
    assert result.code == 6, result.stderr[-2000:]
    record = json.loads(result.stdout)["images"][0]
    assert record["status"] == "refused" and any(reason in r for r in record["reasons"])
    host, path = repository_of(candidate["tags"][0]["tag"])
    assert digest_of(host, path, SLIM_TAG) is None and digest_of(host, path, ALIAS) is None


def test_a_registry_that_asks_for_credentials_is_named_with_how_to_log_in(
    candidate: dict,
    demo_build: DemoBuild,
    registry: str,  # noqa: F811
) -> None:
    proxy = FaultyProxy(registry, 401, times=-1, body=b'{"errors":[{"code":"UNAUTHORIZED"}]}')
    try:
        result = publish(demo_build, f"127.0.0.1:{proxy.port}", "--from-candidate", CANDIDATE)
    finally:
        proxy.close()
    assert result.code == 6
    record = json.loads(result.stdout)["images"][0]
    assert "asks for credentials (401)" in record["reasons"][-1]
    assert "docker login 127.0.0.1:" in record["reasons"][-1]


def test_promotion_without_an_engine_gives_the_final_tags_the_candidates_digest(
    candidate: dict,
    demo_build: DemoBuild,
    registry: str,  # noqa: F811
) -> None:
    result = publish(demo_build, registry, "--from-candidate", CANDIDATE)
    assert result.code == 0, result.stderr[-3000:]
    record = json.loads(result.stdout)["images"][0]
    assert record["status"] == "published"
    host, path = repository_of(candidate["tags"][0]["tag"])
    want = candidate["tags"][0]["digest"]
    assert digest_of(host, path, SLIM_TAG) == want and digest_of(host, path, ALIAS) == want
    assert {t["digest"] for t in record["tags"]} == {want}
    again = publish(demo_build, registry, "--from-candidate", CANDIDATE)
    assert again.code == 0 and json.loads(again.stdout)["images"][0]["status"] == "unchanged"


def test_an_index_of_candidates_is_promoted_as_that_index(
    demo_verify: dict,
    demo_build: DemoBuild,
    registry: str,  # noqa: F811
) -> None:
    # Its own namespace of the registry, so the final tags are free.
    space = f"{registry}/index"
    pushed = publish(demo_build, space, "--candidate", "single")
    assert pushed.code == 0, pushed.stderr[-2000:]
    tag = json.loads(pushed.stdout)["images"][0]["tags"][0]
    host, path = repository_of(tag["tag"])
    _, manifest = api(f"http://{host}/v2/{path}/manifests/{tag['digest']}")
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {
                    "mediaType": json.loads(manifest).get(
                        "mediaType", "application/vnd.docker.distribution.manifest.v2+json"
                    ),
                    "digest": tag["digest"],
                    "size": len(manifest),
                    "platform": {"os": "linux", "architecture": "amd64"},
                }
            ],
        }
    ).encode()
    api(
        f"http://{host}/v2/{path}/manifests/{SLIM_TAG}-candidate-multi",
        "PUT",
        index,
        OCI_INDEX,
    )
    result = publish(demo_build, space, "--from-candidate", "multi")
    assert result.code == 0, result.stderr[-3000:]
    want = "sha256:" + hashlib.sha256(index).hexdigest()
    assert digest_of(host, path, SLIM_TAG) == want
