"""imagekit publish against a real registry (Debian's docker-registry on 127.0.0.1)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from imagekit.adapters.registry_api import MANIFEST_TYPES
from tests.integration.conftest import TEST_LABELS, DemoBuild, Session, imagekit
from tests.integration.engines import free_port, running_registry
from tests.integration.proxies import FaultyProxy, StallingProxy

SLIM = "2.13.0-cpu-py3.11-slim"
SLIM_TAG = "2.13.0-cpu-py3.11-slim"
ALIAS = "2.13-cpu-slim"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_registry(tmp_path_factory.mktemp("registry")) as host:
        yield host


@pytest.fixture(scope="module")
def published(demo_verify: dict, demo_build: DemoBuild, registry: str) -> dict:
    """The verified demo slim, published once to the module's registry."""
    result = imagekit(
        "publish",
        "--matrix",
        str(demo_build.matrix),
        "--only",
        SLIM,
        "--registry",
        registry,
        "--results",
        str(demo_build.results),
        "--json",
    )
    assert result.code == 0, result.stderr[-3000:]
    return json.loads(result.stdout)["images"][0]


def head_digest(reference: str) -> str:
    host, _, rest = reference.partition("/")
    path, _, tag = rest.rpartition(":")
    request = urllib.request.Request(
        f"http://{host}/v2/{path}/manifests/{tag}",
        method="HEAD",
        # What a push made: a Docker v2 manifest from the classic store, an OCI manifest (or
        # index) from the containerd store.
        headers={"Accept": MANIFEST_TYPES},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return str(response.headers["Docker-Content-Digest"])


def test_a_verified_image_is_pushed_and_its_digest_read_back(
    published: dict, demo_build: DemoBuild, registry: str, session: Session
) -> None:
    assert published["status"] == "published"
    assert published["image_id"] == demo_build.records[SLIM]["build"]["image_id"]
    tags = {t["tag"]: t for t in published["tags"]}
    versioned = f"{registry}/{session.repository}:{SLIM_TAG}"
    assert tags[versioned]["status"] == "published"
    assert tags[versioned]["digest"] == head_digest(versioned)
    assert tags[f"{registry}/{session.repository}:{ALIAS}"]["moved_from"] is None
    manifest = json.loads(Path(published["manifest_file"]).read_text())
    assert manifest["digest"] == tags[versioned]["digest"]
    assert any(
        p["name"] == "torch" and p["version"] == "2.13.0+cpu" for p in manifest["python_packages"]
    )
    assert any(p["name"] == "libc6" for p in manifest["os_packages"])
    sbom = json.loads(Path(published["sbom_file"]).read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    assert sbom["metadata"]["component"]["version"] == tags[versioned]["digest"]
    assert any(c["purl"].startswith("pkg:pypi/torch@2.13.0") for c in sbom["components"])


def test_a_second_publish_of_the_same_image_is_a_no_op(
    published: dict, demo_build: DemoBuild, registry: str, session: Session
) -> None:
    again = imagekit(
        "publish",
        "--matrix",
        str(demo_build.matrix),
        "--only",
        SLIM,
        "--registry",
        registry,
        "--results",
        str(demo_build.results),
        "--json",
    )
    assert again.code == 0, again.stderr[-2000:]
    tags = {t["tag"]: t for t in json.loads(again.stdout)["images"][0]["tags"]}
    versioned = tags[f"{registry}/{session.repository}:{SLIM_TAG}"]
    assert versioned["status"] == "unchanged" and versioned["attempts"] == 0


@pytest.mark.parametrize("case", ["no results", "failing results", "another image id"])
def test_publishing_is_refused_without_passing_results_for_this_image(
    case: str, demo_verify: dict, demo_build: DemoBuild, registry: str, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    source = demo_verify["run"] / "images" / f"{SLIM}.json"
    if case != "no results":
        record = json.loads(source.read_text())
        if case == "failing results":
            for probe in record["verify"]["probes"]:
                if probe["probe"] == "autograd":
                    probe["status"] = "fail"
        else:
            record["verify"]["image_id"] = "sha256:" + "0" * 64
        (results / "run1" / "images").mkdir(parents=True)
        (results / "run1" / "images" / f"{SLIM}.json").write_text(json.dumps(record))
    result = imagekit(
        "publish",
        "--matrix",
        str(demo_build.matrix),
        "--only",
        SLIM,
        "--registry",
        registry,
        "--results",
        str(results),
        "--json",
    )
    assert result.code == 6
    reasons = " ".join(json.loads(result.stdout)["images"][0]["reasons"])
    expected = {
        "no results": "no verify results for image",
        "failing results": "autograd fail",
        "another image id": "belong to other image ids",
    }[case]
    assert expected in reasons
    assert "not published" in result.stderr


def _push_other(engine: docker.DockerClient, slim_id: str, reference: str) -> str:
    """Push another image (slim's layers, a different config) as `reference`."""
    import io
    import tarfile

    dockerfile = f"FROM {slim_id}\nLABEL io.imagekit.test-other=1\n".encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        archive.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    image, _ = engine.images.build(
        fileobj=context, custom_context=True, rm=True, labels=TEST_LABELS
    )
    repository, _, tag = reference.rpartition(":")
    image.tag(repository, tag)
    for item in engine.api.push(repository, tag, stream=True, decode=True):
        assert "error" not in item, item
    return str(image.id)


def test_a_versioned_tag_with_other_content_is_never_overwritten(
    published: dict,
    demo_build: DemoBuild,
    registry: str,
    session: Session,
    engine: docker.DockerClient,
) -> None:
    slim_id = demo_build.records[SLIM]["build"]["image_id"]
    other = _push_other(engine, slim_id, f"{registry}/taken/{session.repository}:{SLIM_TAG}")
    result = imagekit(
        "publish",
        "--matrix",
        str(demo_build.matrix),
        "--only",
        SLIM,
        "--registry",
        f"{registry}/taken",
        "--results",
        str(demo_build.results),
        "--json",
    )
    assert result.code == 6
    reason = json.loads(result.stdout)["images"][0]["reasons"][0]
    assert "already exists with other content" in reason
    assert other in reason and slim_id in reason
    engine.images.remove(other, force=True, noprune=True)


def test_an_alias_move_is_recorded_with_the_old_digest(
    published: dict,
    demo_build: DemoBuild,
    registry: str,
    session: Session,
    engine: docker.DockerClient,
) -> None:
    slim_id = demo_build.records[SLIM]["build"]["image_id"]
    alias = f"{registry}/moving/{session.repository}:{ALIAS}"
    other = _push_other(engine, slim_id, alias)
    old = head_digest(alias)
    result = imagekit(
        "publish",
        "--matrix",
        str(demo_build.matrix),
        "--only",
        SLIM,
        "--registry",
        f"{registry}/moving",
        "--results",
        str(demo_build.results),
        "--json",
    )
    assert result.code == 0, result.stderr[-2000:]
    tags = {t["tag"]: t for t in json.loads(result.stdout)["images"][0]["tags"]}
    assert tags[alias]["moved_from"] == old
    assert tags[alias]["digest"] == head_digest(alias) != old
    engine.images.remove(other, force=True, noprune=True)


def test_a_503_once_is_retried_and_the_attempts_recorded(
    published: dict, demo_build: DemoBuild, registry: str, session: Session
) -> None:
    proxy = FaultyProxy(registry, 503, times=1, body=b'{"errors":[{"code":"UNAVAILABLE"}]}')
    try:
        result = imagekit(
            "publish",
            "--matrix",
            str(demo_build.matrix),
            "--only",
            SLIM,
            "--registry",
            # A namespace of its own: the containerd store pushes no manifest for a tag that
            # already holds it, and the fault is in the manifest PUT.
            f"127.0.0.1:{proxy.port}/retried",
            "--results",
            str(demo_build.results),
            "--backoff-s",
            "0.5",
            "--json",
        )
    finally:
        proxy.close()
    assert result.code == 0, result.stderr[-2000:]
    assert proxy.faults == 1
    tags = json.loads(result.stdout)["images"][0]["tags"]
    retried = [t for t in tags if t.get("attempts", 0) == 2]
    assert len(retried) == 1 and "503" in retried[0]["errors"][0]


def test_a_denied_push_fails_at_once_without_retries(
    published: dict, demo_build: DemoBuild, registry: str
) -> None:
    denied = (
        b'{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}'
    )
    proxy = FaultyProxy(registry, 403, times=-1, body=denied)
    try:
        result = imagekit(
            "publish",
            "--matrix",
            str(demo_build.matrix),
            "--only",
            SLIM,
            "--registry",
            f"127.0.0.1:{proxy.port}/denied",
            "--results",
            str(demo_build.results),
            "--json",
        )
    finally:
        proxy.close()
    assert result.code == 6, result.stderr[-2000:]
    image = json.loads(result.stdout)["images"][0]
    assert image["status"] == "failed"
    failed = [t for t in image["tags"] if t["status"] == "failed"]
    assert failed[0]["attempts"] == 1 and failed[0]["error"].startswith("permanent:")
    # The classic store quotes the registry's message; the containerd store its status.
    assert "denied" in failed[0]["error"] or "403 Forbidden" in failed[0]["error"]


def test_a_push_the_engine_keeps_retrying_is_cancelled_at_the_deadline(
    published: dict, demo_build: DemoBuild, registry: str
) -> None:
    """The registry holds every layer upload open: the engine would wait and retry for many
    minutes; `--deadline-s` ends the publish, names the layers and the engine's last word.

    The engine's push is cancelled (Docker 20.10 logs "Not continuing with push after error:
    context canceled"), but 20.10 leaves the upload it was making open until its transport
    gives up: its blob upload is not tied to the push's context. So what is asserted here is
    the bound; Docker 26 letting go of its uploads is asserted in test_boxed_docker.py."""
    proxy = StallingProxy(registry)
    started = time.monotonic()
    try:
        result = imagekit(
            "publish", "--matrix", str(demo_build.matrix), "--only", SLIM,
            "--registry", f"127.0.0.1:{proxy.port}/stalled", "--deadline-s", "20",
            "--results", str(demo_build.results), "--json",
            timeout_s=240,
        )  # fmt: skip
        assert result.code == 6, result.stderr[-2000:]
        assert proxy.held >= 1
        # 20 s of deadline, then the cancel; the rest is the CLI's start and the gate.
        assert time.monotonic() - started < 180  # an unbounded push took 13 minutes
    finally:
        proxy.close()
    image = json.loads(result.stdout)["images"][0]
    assert image["status"] == "failed"
    (failed,) = [t for t in image["tags"] if t["status"] == "failed"]
    assert failed["error"].startswith("permanent: deadline: the push of"), failed
    assert "was cancelled (" in failed["error"] and "no layer had started" not in failed["error"]
    assert "Traceback" not in result.stderr


def test_a_registry_that_is_down_fails_with_a_clear_error_and_nothing_pushed(
    demo_verify: dict, demo_build: DemoBuild
) -> None:
    result = imagekit(
        "publish",
        "--matrix",
        str(demo_build.matrix),
        "--only",
        SLIM,
        "--registry",
        f"127.0.0.1:{free_port()}",
        "--results",
        str(demo_build.results),
        "--json",
    )
    assert result.code == 6
    image = json.loads(result.stdout)["images"][0]
    assert image["status"] == "failed" and image["tags"] == []
    assert "cannot reach the registry" in image["reasons"][-1]


def test_tags_lists_versioned_tags_and_aliases(demo_build: DemoBuild, session: Session) -> None:
    result = imagekit("tags", "--matrix", str(demo_build.matrix), "--json")
    assert result.code == 0
    rows = {(r["tag"], r["kind"]) for r in json.loads(result.stdout)}
    assert (f"{session.repository}:{SLIM_TAG}", "versioned") in rows
    assert (f"{session.repository}:latest", "alias") in rows


def test_doctor_reads_labels_from_the_registry_without_pulling(
    published: dict, registry: str, session: Session, engine: docker.DockerClient
) -> None:
    versioned = f"{registry}/{session.repository}:{SLIM_TAG}"
    # Only the registry has this name now: doctor must read the config blob from there.
    engine.api.remove_image(versioned)
    result = imagekit("doctor", "--image", versioned, "--nvidia-smi", "/nonexistent/nvidia-smi")
    assert result.code == 0, result.stderr
    assert f"{versioned}: runs" in result.stdout
    assert "a CPU image: it runs on any host" in result.stdout
    assert not any(versioned in t for i in engine.images.list() for t in i.tags)  # not pulled
    missing = imagekit("doctor", "--image", f"{registry}/{session.repository}:no-such-tag")
    assert missing.code == 2 and "neither in the local engine nor in its registry" in missing.stderr
