"""imagekit build on a real engine, with the CPU demo cell (torch 2.13.0 CPU, Debian 12)."""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import signal
import subprocess
import tarfile
from pathlib import Path

import docker
import pytest

from tests.children import default_stop_signals
from tests.integration.conftest import (
    TEST_LABELS,
    DemoBuild,
    Session,
    SessionCa,
    imagekit,
    matrix_text,
)

SLIM = "2.13.0-cpu-py3.11-slim"
FULL = "2.13.0-cpu-py3.11-full"


def test_slim_and_full_of_the_cpu_cell_build(
    demo_build: DemoBuild, engine: docker.DockerClient, session: Session
) -> None:
    assert set(demo_build.records) == {SLIM, FULL}
    for name, flavour in ((SLIM, "slim"), (FULL, "full")):
        build = demo_build.records[name]["build"]
        assert build["status"] == "built", build["message"]
        assert build["size_bytes"] < build["size_budget_bytes"]
        assert build["layer_count"] >= 3
        assert build["largest_layers"][0]["size_bytes"] > 100_000_000  # the venv
        image = engine.images.get(build["image_id"])
        labels = image.labels
        assert labels["io.imagekit.torch"] == "2.13.0"
        assert labels["io.imagekit.flavour"] == flavour
        assert labels["io.imagekit.input-hash"] == build["input_hash"]
        assert f"{session.repository}:2.13.0-cpu-py3.11-{flavour}" in image.tags
        # full starts as root only for its entrypoint, which hands over to the image's user
        # (tests/integration/test_first_hour.py), as 0:65534 to tell its start from --user 0:0;
        # the label names that user.
        assert image.attrs["Config"]["User"] == ("1000:100" if flavour == "slim" else "0:65534")
        assert labels["io.imagekit.user"] == "1000:100"
        log = Path(build["log_path"]).read_text()
        step = "Step " if build["builder"] == "sdk" else "] RUN "  # legacy's, BuildKit's steps
        assert log.count(step) > 1


def test_the_default_build_says_its_builder_first_and_records_it(demo_build: DemoBuild) -> None:
    """`--builder auto`, the default: BuildKit where the buildx plugin answers on this engine
    (`make engine` installs it), said in the first line and kept in every image's record."""
    answers = subprocess.run(["docker", "buildx", "version"], capture_output=True, check=False)
    builder = "buildx" if answers.returncode == 0 else "sdk"
    first = demo_build.first.stderr.splitlines()[0]
    assert first.startswith(f"builder: {builder} ("), demo_build.first.stderr[-3000:]
    for record in demo_build.records.values():
        build = record["build"]
        assert build["builder"] == builder
        assert first == f"builder: {builder} ({build['builder_why']})"


def test_the_torch_inside_is_the_cpu_wheel_and_runs_as_the_non_root_user(
    demo_build: DemoBuild, engine: docker.DockerClient
) -> None:
    image = demo_build.records[SLIM]["build"]["image_id"]
    out = engine.containers.run(
        image,
        ["python", "-c", "import os, torch; print(torch.__version__, os.getuid(), os.getcwd())"],
        remove=True,
        labels=TEST_LABELS,
    )
    assert out.decode().split() == ["2.13.0+cpu", "1000", "/workspace"]


def test_a_second_build_reports_both_images_up_to_date(
    demo_build: DemoBuild, wheelhouse: Path, session_ca: SessionCa
) -> None:
    ca = session_ca.path  # the bundle the first build was given
    again = imagekit(
        "build",
        "--matrix",
        str(demo_build.matrix),
        "--wheelhouse",
        str(wheelhouse),
        "--ca-cert",
        str(ca),
        "--results",
        str(demo_build.results),
        "--json",
    )
    assert again.code == 0, again.stderr[-2000:]
    statuses = {r["name"]: r["status"] for r in json.loads(again.stdout)["results"]}
    assert statuses == {SLIM: "up-to-date", FULL: "up-to-date"}
    assert "up-to-date" in again.stderr


def test_full_contains_every_layer_of_its_slim(
    demo_build: DemoBuild, engine: docker.DockerClient
) -> None:
    slim = engine.images.get(demo_build.records[SLIM]["build"]["image_id"])
    full = engine.images.get(demo_build.records[FULL]["build"]["image_id"])
    slim_layers = slim.attrs["RootFS"]["Layers"]
    full_layers = full.attrs["RootFS"]["Layers"]
    assert full_layers[: len(slim_layers)] == slim_layers
    assert len(full_layers) > len(slim_layers)
    # Full keeps slim's working directory (it sets none of its own).
    assert slim.attrs["Config"]["WorkingDir"] == full.attrs["Config"]["WorkingDir"] == "/workspace"
    assert full.labels["io.imagekit.managed"] == slim.labels["io.imagekit.managed"] == "true"


def _layer_texts(engine: docker.DockerClient, image_id: str) -> list[tuple[str, bytes]]:
    """Every file of every layer of `docker save IMAGE`, as (name, bytes)."""
    saved = b"".join(engine.images.get(image_id).save(named=False))
    found = []
    with tarfile.open(fileobj=io.BytesIO(saved)) as outer:
        found += _members(outer)
    return found


def _members(outer: tarfile.TarFile) -> list[tuple[str, bytes]]:
    """The files of `docker save`: a layer (`layer.tar` on the classic store, a compressed
    OCI blob on the containerd store) is opened and its files listed; the rest as they are."""
    found = []
    for member in outer.getmembers():
        data = outer.extractfile(member)
        if data is None:
            continue
        raw = data.read()
        maybe_layer = member.name.endswith(".tar") or "/layer" in member.name
        if maybe_layer or member.name.startswith("blobs/"):
            try:
                with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as inner:
                    for item in inner.getmembers():
                        if item.isfile():
                            content = inner.extractfile(item)
                            name = f"{member.name}:{item.name}"
                            found.append((name, content.read() if content else b""))
                continue
            except tarfile.ReadError:
                pass  # an OCI blob that is a config or a manifest
        found.append((member.name, raw))
    return found


@pytest.mark.parametrize("name", [SLIM, FULL])
def test_the_ca_bundle_is_in_no_layer_of_the_final_image(
    demo_build: DemoBuild, engine: docker.DockerClient, name: str
) -> None:
    marker = demo_build.marker.encode()
    files = _layer_texts(engine, demo_build.records[name]["build"]["image_id"])
    assert len(files) > 1000
    assert [n for n, data in files if marker in data] == []
    assert [n for n, _ in files if n.endswith("ca-bundle.crt")] == []


def test_a_broken_cell_fails_alone_while_another_cell_still_builds(
    tmp_path: Path, session: Session, wheelhouse: Path, demo_base: str
) -> None:
    # torch 2.12.1 is a real release, but the wheelhouse does not hold it: pip fails.
    broken = '  - torch: "2.12.1"\n    cuda: [cpu]\n    flavours: [slim]\n'
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix_text(session.repository.replace("/", "-broken/"), demo_base, broken))
    result = imagekit(
        "build",
        "--matrix",
        str(matrix),
        "--wheelhouse",
        str(wheelhouse),
        "--flavour",
        "slim",
        "--jobs",
        "2",
        "--results",
        str(tmp_path / "results"),
        "--json",
    )
    assert result.code == 4
    statuses = {r["name"]: r for r in json.loads(result.stdout)["results"]}
    assert statuses["2.12.1-cpu-py3.11-slim"]["status"] == "failed"
    assert "torch==2.12.1" in statuses["2.12.1-cpu-py3.11-slim"]["message"]
    assert "last lines of the build log" in statuses["2.12.1-cpu-py3.11-slim"]["message"]
    assert statuses[SLIM]["status"] == "built"
    assert "1 of 2 images failed" in result.stderr


def test_a_dead_engine_exits_3_with_how_to_start_one(tmp_path: Path) -> None:
    result = imagekit(
        "build",
        "--matrix",
        "examples/cpu.yaml",
        "--no-ca-cert",
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"},
    )
    assert result.code == 3
    assert "no Docker engine answers" in result.stderr
    assert "make engine" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_input_is_reported_before_any_engine_call(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(Path("examples/cpu.yaml").read_text().replace('"2.13.0"', '"2.13.9"'))
    result = imagekit(
        "build",
        "--matrix",
        str(matrix),
        "--no-ca-cert",
        env={"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"},
    )
    assert result.code == 2
    assert f"{matrix}:" in result.stderr and "torch 2.13.9 is not a release" in result.stderr


def test_a_missing_base_image_fails_with_a_hint_and_no_pull(
    tmp_path: Path, session: Session, wheelhouse: Path
) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix_text(session.repository, "imagekit-base/nothing:here"))
    result = imagekit(
        "build", "--matrix", str(matrix), "--no-ca-cert", "--results", str(tmp_path), "--json"
    )
    assert result.code == 4
    rows = json.loads(result.stdout)["results"]
    assert rows[0]["status"] == "failed"
    assert "imagekit base bootstrap" in rows[0]["message"]
    assert rows[1]["status"] == "skipped"


def test_gc_removes_imagekit_leftovers_and_nothing_else(engine: docker.DockerClient) -> None:
    run_id = f"test-gc-{secrets.token_hex(4)}"
    ours = engine.containers.create(
        "imagekit-base/debian:bookworm",
        ["true"],
        labels={**TEST_LABELS, "io.imagekit.run-id": run_id},
    )
    other_run = engine.containers.create(
        "imagekit-base/debian:bookworm",
        ["true"],
        labels={**TEST_LABELS, "io.imagekit.run-id": run_id + "-other"},
    )
    theirs = engine.containers.create("imagekit-base/debian:bookworm", ["true"], labels=TEST_LABELS)
    try:
        everything = imagekit("gc", "--dry-run")
        assert everything.code == 0
        assert ours.id[:12] in everything.stdout and other_run.id[:12] in everything.stdout
        assert theirs.id[:12] not in everything.stdout
        # A run's own leftovers only: the engine's build cache (dangling build stages, which
        # `make demo` and `make demo-cuda` rebuild from) is not this test's to remove.
        listed = imagekit("gc", "--dry-run", "--run-id", run_id)
        assert listed.code == 0
        assert ours.id[:12] in listed.stdout and other_run.id[:12] not in listed.stdout
        assert "builder stage" not in listed.stdout
        removed = imagekit("gc", "--run-id", run_id)
        assert removed.code == 0
        with pytest.raises(docker.errors.NotFound):
            engine.containers.get(ours.id)
        assert engine.containers.get(theirs.id).id == theirs.id
        assert engine.containers.get(other_run.id).id == other_run.id
    finally:
        theirs.remove(force=True)
        other_run.remove(force=True)
        with contextlib.suppress(docker.errors.NotFound):
            ours.remove(force=True)


def test_no_build_container_is_left_behind(
    demo_build: DemoBuild, engine: docker.DockerClient
) -> None:
    leftovers = engine.containers.list(all=True, filters={"label": "io.imagekit.stage"})
    assert leftovers == []


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_during_a_build_exits_with_its_status_and_leaves_no_container(
    tmp_path: Path,
    session: Session,
    wheelhouse: Path,
    demo_base: str,
    engine: docker.DockerClient,
    sig: int,
    code: int,
) -> None:
    import os
    import sys
    import time

    from tests.integration.conftest import ROOT

    # A cell id of this test's own: its build containers carry it (io.imagekit.cell), so the
    # test waits for its own build and not for another one on a shared engine.
    cell = f"stop-{secrets.token_hex(4)}"
    text = matrix_text(session.repository.replace("/", "-stop/"), demo_base)
    text = text.replace('  - torch: "2.13.0"\n', f'  - torch: "2.13.0"\n    name: "{cell}"\n', 1)
    assert f'name: "{cell}"' in text
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(text)
    mine = {"label": f"io.imagekit.cell={cell}-cpu-py3.11"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "imagekit",
            "build",
            "--matrix",
            str(matrix),
            "--builder",
            "sdk",  # the legacy builder's step containers carry the cell's label
            "--no-cache",
            "--flavour",
            "slim",
            "--wheelhouse",
            str(wheelhouse),
            "--no-ca-cert",
            "--results",
            str(tmp_path / "results"),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CI": "true"},
        preexec_fn=default_stop_signals,
    )
    try:
        deadline = time.monotonic() + 300
        # Stop while pip runs inside a labelled intermediate container of the builder stage.
        while time.monotonic() < deadline:
            if engine.containers.list(filters=mine):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the build never reached its pip step")
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, stderr[-2000:]
    deadline = time.monotonic() + 60  # the engine cancels the build and removes its container
    while engine.containers.list(all=True, filters=mine):
        assert time.monotonic() < deadline, "a build container outlived the interrupted build"
        time.sleep(1)
