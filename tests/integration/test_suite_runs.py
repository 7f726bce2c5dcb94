"""A killed run's leftovers, removed by the next run (tests/integration/leftovers.py), on the
real engine. The names and labels here are this test's own, so that the sweep it calls cannot
touch what the sessions running beside it made."""

from __future__ import annotations

import io
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from tests.integration import leftovers
from tests.integration.conftest import ROOT


def dangling_image(engine: docker.DockerClient, base: str, labels: dict[str, str], tag: str) -> str:
    """An image with `labels` and no name, as a rebuild leaves the one it replaced (on either
    store: the containerd store deletes an image whose last name is removed)."""
    dockerfile = f"FROM {base}\nLABEL " + " ".join(f'{k}="{v}"' for k, v in labels.items())
    image, _ = engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    repository, name = tag.rsplit(":", 1)
    engine.images.get(base).tag(repository, name)  # the name moves on; the image dangles
    engine.api.remove_image(tag, noprune=True)  # the base keeps its own name
    return str(image.id)


def test_what_a_killed_run_made_goes_and_what_it_did_not_make_stays(
    engine: docker.DockerClient, demo_base: str
) -> None:
    hex_ = secrets.token_hex(4)
    prefix, label, stage = f"imagekit-stale-{hex_}-", f"io.imagekit.stale-{hex_}", f"stage-{hex_}"
    made: list[str] = []
    try:
        # The killed run's: a box (by name) with its volume, a labelled container, a network,
        # an image under its repository, a labelled image, and a build stage left dangling.
        volume = engine.volumes.create(f"{prefix}box")
        box = engine.containers.create(
            demo_base, ["true"], name=f"{prefix}box", volumes={volume.name: {"bind": "/v"}}
        )
        labelled = engine.containers.create(demo_base, ["true"], labels={label: "1"})
        network = engine.networks.create(f"{prefix}net")
        engine.images.get(demo_base).tag(f"{prefix}x/pytorch", "slim")
        labelled_image = dangling_image(engine, demo_base, {label: "1"}, f"stale-{hex_}:a")
        stage_id = dangling_image(engine, demo_base, {stage: "builder"}, f"stale-{hex_}:b")
        # What it found there and left alone: a stage dangling before it started, a container
        # of someone else's.
        kept_stage = dangling_image(engine, demo_base, {stage: "older"}, f"stale-{hex_}:c")
        theirs = engine.containers.create(demo_base, ["true"], name=f"other-{hex_}")
        made += [theirs.id, kept_stage]

        removed = leftovers.remove_leftovers(
            engine, frozenset({kept_stage}), prefix=prefix, labels=(label,), stage_labels=(stage,)
        )

        assert (removed.containers, removed.volumes, removed.networks) == (2, 1, 1)
        assert removed.images == 3 and removed.left == []
        for gone in (box.id, labelled.id):
            with pytest.raises(docker.errors.NotFound):
                engine.containers.get(gone)
        with pytest.raises(docker.errors.NotFound):
            engine.volumes.get(volume.name)
        with pytest.raises(docker.errors.NotFound):
            engine.networks.get(network.id)
        for gone in (f"{prefix}x/pytorch:slim", labelled_image, stage_id):
            with pytest.raises(docker.errors.ImageNotFound):
                engine.images.get(gone)
        # The base image the killed run had tagged keeps its own name.
        assert demo_base in engine.images.get(demo_base).tags
        engine.containers.get(theirs.id)
        engine.images.get(kept_stage)
    finally:
        for container_id in made[:1]:
            engine.containers.get(container_id).remove(force=True)
        for image_id in made[1:]:
            engine.api.remove_image(image_id, force=True)


def run_start(engine: docker.DockerClient, state: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tests.integration.runs", "before", str(os.getpid())],
        cwd=ROOT,
        env={**os.environ, leftovers.STATE_VARIABLE: str(state), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_run_that_finds_another_alive_on_its_engine_stops_before_touching_it(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    # This test's own process stands for the run in progress: it is alive.
    started = leftovers.process_started(os.getpid())
    assert started is not None
    os.environ[leftovers.STATE_VARIABLE] = str(tmp_path)
    try:
        path = leftovers.record_path(leftovers.engine_id(engine))
    finally:
        del os.environ[leftovers.STATE_VARIABLE]
    path.parent.mkdir(parents=True, exist_ok=True)
    record = leftovers.RunRecord(os.getpid(), started).to_json()
    path.write_text(record)

    done = run_start(engine, tmp_path)

    assert done.returncode == 1, done.stderr
    assert f"another run of the suite (pid {os.getpid()}" in done.stderr
    assert f"kill -INT {os.getpid()}" in done.stderr
    assert path.read_text() == record  # the live run's record is its own still


def test_a_run_without_room_stops_saying_what_holds_the_disk(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    # No record: nothing to remove, and the room asked for is more than any disk here has, so
    # no trim of the build cache could give it: the cache the sessions beside use stays warm.
    done = run_start(engine, tmp_path, **{leftovers.MIN_FREE_VARIABLE: "1000000"})

    assert done.returncode == 1, done.stderr
    assert "build cache trimmed" not in done.stderr
    # From the run's own line on: a line naming a stranded classic store may come between the
    # engine's holdings and the hint (an engine upgraded from 20.10 by `make engine`).
    lines = done.stderr.strip().splitlines()
    said = lines[max(i for i, line in enumerate(lines) if "GB free on " in line) :]
    assert said[0].startswith("imagekit tests: ")
    # The disk's own figure (not compared with a reading here: the sessions beside this test
    # move GBs a minute).
    total = shutil.disk_usage(leftovers.room(engine).paths[0]).total / 10**9
    assert 0 < float(said[0].split()[2]) <= total
    assert "needs about 1e+06 GB" in said[0]
    assert said[1].strip().startswith("the engine holds: images ")
    stranded = leftovers.stranded_classic_store(engine.info())
    assert len(said) == (4 if stranded else 3), said
    if stranded:
        assert said[2].strip().startswith(f"{stranded[0]} holds "), said
    assert said[-1].strip().startswith("hint: free room: "), said
    assert not list(tmp_path.iterdir())  # a run that did not start is not written down
