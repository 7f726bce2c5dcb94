"""Docker 26 in a box (tests/integration/engines.py), which the tests may do to what they may
not do to the host's engine:

- kill it under imagekit: the run ends with exit 3 and the engine's line, and once the engine is
  back the next run removes what the dead one left;
- let a registry hold its pushes open: `--deadline-s` cancels them, as on the host's engine;
- give it a GPU that is not there: CDI on, with a spec of a fake device (a character device at
  /dev/nvidia0, a stub driver library, a variable), so that `verify --gpus all` and `run --gpus
  all` are shown to hand a GPU to their containers through the very request a real one takes.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from tests.children import default_stop_signals
from tests.integration.conftest import ROOT, CliResult, DemoBuild, imagekit, matrix_text
from tests.integration.engines import (
    FAKE_GPU_ENV,
    FAKE_GPU_LIBRARY,
    FAKE_GPU_NODE,
    OtherEngine,
    copy_image,
    free_port,
    holding,
    kill,
    restart,
    running_registry,
    start_docker_classic,
)
from tests.integration.proxies import StallingProxy

pytestmark = [pytest.mark.integration, pytest.mark.contract]

SLIM = "2.13.0-cpu-py3.11-slim"
FULL = "2.13.0-cpu-py3.11-full"
BRIDGE, SUBNET = "ikt-br3", "10.213.10.1/24"
ENGINE_LINES = ("stopped in the middle of", "no Docker engine answers")


@dataclass
class Doomed:
    engine: OtherEngine
    matrix: Path
    results: Path
    wheelhouse: Path


@pytest.fixture(scope="module")
def doomed(
    engine: docker.DockerClient,
    demo_base: str,
    wheelhouse: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Doomed]:
    """A boxed Docker 26 with the fake GPU, holding the base, and the demo's slim (without
    torch.compile) to build."""
    root = Path(f"/tmp/imagekit-it-doomed-{secrets.token_hex(3)}")
    started = start_docker_classic(root, BRIDGE, SUBNET, fake_gpu=True)
    with holding(engine, demo_base, started) as other:
        folder = tmp_path_factory.mktemp("doomed")
        matrix = folder / "matrix.yaml"
        text = matrix_text(f"imagekit-it-{secrets.token_hex(4)}/pytorch", demo_base)
        matrix.write_text(text.replace("  slim:\n", "  slim:\n    compile: false\n", 1))
        yield Doomed(other, matrix, folder / "results", wheelhouse)


def start(doomed: Doomed, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "imagekit", *args, "--matrix", str(doomed.matrix),
         "--flavour", "slim", "--results", str(doomed.results)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CI": "true", **doomed.engine.env()},
        preexec_fn=default_stop_signals,
    )  # fmt: skip


def kill_when(doomed: Doomed, process: subprocess.Popen[str], label: str) -> str:
    """Kill the engine once a running container carries `label`, start it again; the
    command's stderr, once it ended."""
    client = doomed.engine.client()
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and process.poll() is None:
            if client.containers.list(filters={"label": label, "status": "running"}):
                break
            time.sleep(0.3)
        else:
            pytest.fail(f"no running container with {label} appeared: {process.communicate()}")
    finally:
        client.close()
    time.sleep(1)
    kill(doomed.engine)
    _, stderr = process.communicate(timeout=300)
    restart(doomed.engine)
    assert process.returncode == 3, stderr[-3000:]
    assert any(line in stderr for line in ENGINE_LINES), stderr[-3000:]
    assert "Traceback" not in stderr and "cannot use" not in stderr
    return stderr


def containers(doomed: Doomed, label: str) -> list[str]:
    client = doomed.engine.client()
    try:
        return [c.name for c in client.containers.list(all=True, filters={"label": label})]
    finally:
        client.close()


@dataclass(frozen=True)
class Rebuilt:
    """Slim's legacy build with the engine killed under it, and the next one."""

    died: str  # the killed build's stderr
    left: list[str]  # the containers the engine kept of it
    again: CliResult  # the next build, asked to keep its builder stage (--keep-stages)


@pytest.fixture(scope="module")
def rebuilt(doomed: Doomed) -> Rebuilt:
    """The engine killed under slim's first build, then slim built again, keeping its builder
    stage: one cold legacy build serves the tidy-up and the builder stage tests."""
    build = ("build", "--builder", "sdk", "--wheelhouse", str(doomed.wheelhouse))
    died = kill_when(doomed, start(doomed, *build), "io.imagekit.stage")
    left = containers(doomed, "io.imagekit.stage")
    return Rebuilt(died, left, slim_build(doomed, "--keep-stages"))


def test_an_engine_that_dies_under_a_build_is_exit_3_and_the_next_build_tidies_up(
    doomed: Doomed, rebuilt: Rebuilt
) -> None:
    assert rebuilt.left  # the engine kept the step's container
    assert rebuilt.again.code == 0, rebuilt.again.stderr[-3000:]
    assert "that ended runs left behind" in rebuilt.again.stderr
    assert containers(doomed, "io.imagekit.stage") == []


def test_a_legacy_build_removes_its_builder_stage_unless_asked_to_keep_it_and_gc_finds_it(
    doomed: Doomed, rebuilt: Rebuilt
) -> None:
    """The legacy builder leaves each builder stage as an untagged image (slim's: about a
    gigabyte), its layer cache. Kept when asked (--keep-stages), found by `imagekit gc`; the
    next build that uses it as its cache removes it, unasked."""
    kept = rebuilt.again
    assert kept.code == 0, kept.stderr[-3000:]
    assert "builder: sdk (legacy: --builder sdk)" in kept.stderr.splitlines()
    (record,) = json.loads(kept.stdout)["results"]
    assert (record["builder"], record["builder_why"]) == ("sdk", "legacy: --builder sdk")
    stages = dangling_stages(doomed)
    assert len(stages) == 1, stages  # the builder stage, kept as the layer cache
    stage = stages[0].removeprefix("sha256:")[:12]
    listed = imagekit("gc", "--dry-run", env=doomed.engine.env())
    assert f"would remove image {stage} <dangling builder stage>" in listed.stdout, listed.stdout
    # The same image again, from the cache: the build reuses the stage, and this time removes it.
    reference = str(record["reference"])
    client = doomed.engine.client()
    try:
        client.images.get(reference).tag(reference + "-moved")
        client.images.remove(reference)
        again = slim_build(doomed)
        assert again.code == 0, again.stderr[-3000:]
        assert again.stderr.splitlines()[0] == "builder: sdk (legacy: --builder sdk)"
        (rebuilt_record,) = json.loads(again.stdout)["results"]
        assert rebuilt_record["status"] == "built"
        assert rebuilt_record["image_id"] == record["image_id"]
        assert dangling_stages(doomed) == []
        log = Path(rebuilt_record["log_path"]).read_text()
        assert f"imagekit: removed the builder stage {stage}" in log, log[-3000:]
    finally:
        client.images.remove(reference + "-moved")
        client.close()


def dangling_stages(doomed: Doomed) -> list[str]:
    """The ids of the untagged builder stages on the boxed engine."""
    client = doomed.engine.client()
    try:
        found = client.images.list(filters={"dangling": True, "label": "io.imagekit.stage"})
        return [str(image.id) for image in found]
    finally:
        client.close()


def test_an_engine_that_dies_under_verify_is_exit_3_and_the_next_verify_tidies_up(
    doomed: Doomed,
) -> None:
    built = imagekit(
        "build", "--builder", "sdk", "--wheelhouse", str(doomed.wheelhouse),
        "--matrix", str(doomed.matrix), "--flavour", "slim",
        "--results", str(doomed.results), env=doomed.engine.env(),
    )  # fmt: skip
    assert built.code == 0, built.stderr[-3000:]
    kill_when(doomed, start(doomed, "verify", "--gpus", "none"), "io.imagekit.run-id")
    assert containers(doomed, "io.imagekit.run-id")  # the engine kept the probe container
    again = imagekit(
        "verify", "--matrix", str(doomed.matrix), "--flavour", "slim", "--gpus", "none",
        "--probes", "env", "--results", str(doomed.results), "--json",
        env=doomed.engine.env(),
    )  # fmt: skip
    assert again.code == 0, again.stderr[-3000:]
    assert "that ended runs left behind" in again.stderr
    assert json.loads(again.stdout)["images"][SLIM]["verify"]["status"] == "pass"
    assert containers(doomed, "io.imagekit.run-id") == []


def test_an_engine_that_dies_under_imagekit_run_is_exit_3_and_the_next_run_tidies_up(
    doomed: Doomed, tmp_path: Path, engine: docker.DockerClient, demo_build: DemoBuild
) -> None:
    """The session's full image, put into the boxed engine as a pull would (building it there
    took two minutes of the suite's)."""
    full = str(demo_build.records[FULL]["build"]["reference"])
    copy_image(engine, doomed.engine, full)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "imagekit", "run", full, "--jupyter",
         "--workspace", str(tmp_path), "--port", f"{port}:8888"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **doomed.engine.env(local=True)}, preexec_fn=default_stop_signals,
    )  # fmt: skip
    assert process.stdout is not None
    url = process.stdout.readline().strip()  # printed once JupyterLab answers
    assert url.startswith(f"http://127.0.0.1:{port}/lab?token="), process.stderr.read()
    kill(doomed.engine)
    _, stderr = process.communicate(timeout=300)
    restart(doomed.engine)
    assert process.returncode == 3, stderr[-3000:]
    assert "Traceback" not in stderr and "cannot use" not in stderr
    assert containers(doomed, "io.imagekit.service")  # the engine kept the service's container
    again = imagekit(
        "verify", full, "--gpus", "none", "--probes", "env", "--results", str(doomed.results),
        env=doomed.engine.env(),
    )  # fmt: skip
    assert again.code == 0, again.stderr[-3000:]
    assert "that ended runs left behind" in again.stderr
    assert containers(doomed, "io.imagekit.service") == []


def slim_build(doomed: Doomed, *extra: str) -> CliResult:
    """`imagekit build` of slim on the boxed engine with the legacy builder, as JSON."""
    return imagekit(
        "build", "--builder", "sdk", "--wheelhouse", str(doomed.wheelhouse),
        "--matrix", str(doomed.matrix), "--flavour", "slim",
        "--results", str(doomed.results), "--json", *extra, env=doomed.engine.env(),
    )  # fmt: skip


def built_slim(doomed: Doomed) -> str:
    """The slim image's reference, built once (up to date after the first time)."""
    built = slim_build(doomed)
    assert built.code == 0, built.stderr[-3000:]
    (record,) = json.loads(built.stdout)["results"]
    return str(record["reference"])


def env_facts(doomed: Doomed, gpus: str) -> tuple[int, dict, dict]:
    """verify's exit code with the env probe alone, that probe's facts, and run.json's engine."""
    done = imagekit(
        "verify", "--matrix", str(doomed.matrix), "--flavour", "slim", "--gpus", gpus,
        "--probes", "env", "--results", str(doomed.results), "--json",
        env=doomed.engine.env(local=True),  # a local engine: its CDI folders are ours to read
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    data = json.loads(done.stdout)
    (env,) = [p for p in data["images"][SLIM]["verify"]["probes"] if p["probe"] == "env"]
    run = json.loads((doomed.results / data["run_id"] / "run.json").read_text())
    return done.code, env["facts"], run["engine"]


def test_verify_with_gpus_all_hands_the_cdi_gpu_to_the_probe_container(doomed: Doomed) -> None:
    built_slim(doomed)
    code, facts, engine = env_facts(doomed, "all")
    assert engine["gpu_mechanism"] == "cdi"
    assert facts["gpu_device_nodes"] == [FAKE_GPU_NODE]
    assert facts["driver_libraries"] == [FAKE_GPU_LIBRARY]
    name, value = FAKE_GPU_ENV
    assert facts["gpu_environment"][name] == value
    # The CPU build of torch cannot use it (no GPU is really there): a probe failure, exit 5.
    assert code == 5 and facts["cuda_available"] is False
    # Without --gpus nothing is handed over: the device came from the request.
    code, facts, _ = env_facts(doomed, "none")
    assert code == 0 and facts["gpu_device_nodes"] == [] and facts["driver_libraries"] == []


def test_run_with_gpus_all_hands_the_cdi_gpu_to_its_command(doomed: Doomed, tmp_path: Path) -> None:
    image = built_slim(doomed)
    name, value = FAKE_GPU_ENV
    script = f"test -c {FAKE_GPU_NODE} && test -e {FAKE_GPU_LIBRARY} && echo ${name}"
    argv = [
        sys.executable, "-m", "imagekit", "run", image, "--workspace", str(tmp_path),
        "--gpus", "all", "--", "sh", "-c", script,
    ]  # fmt: skip
    done = subprocess.run(
        argv, cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        env={**os.environ, **doomed.engine.env(local=True)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == value


def test_a_push_docker_26_keeps_retrying_is_cancelled_at_the_deadline(
    doomed: Doomed, tmp_path: Path
) -> None:
    """The deadline test of test_publish.py (the host's engine) on Docker 26: the registry
    holds every layer upload open, and `--deadline-s` ends the publish with exit 6, naming the
    layer. (Docker 26, like 20.10, cancels the push but leaves the upload it was making open
    until its transport gives up.)"""
    built_slim(doomed)  # without torch.compile, which the gate asks for: --force
    with running_registry(tmp_path) as registry:
        proxy = StallingProxy(registry)
        started = time.monotonic()
        try:
            done = imagekit(
                "publish", "--matrix", str(doomed.matrix), "--only", SLIM,
                "--registry", f"127.0.0.1:{proxy.port}/stalled", "--deadline-s", "20",
                "--force", "--results", str(doomed.results), "--json",
                env=doomed.engine.env(), timeout_s=240,
            )  # fmt: skip
        finally:
            proxy.close()
    assert done.code == 6, done.stderr[-2000:]
    image = json.loads(done.stdout)["images"][0]
    failed = [t for t in image["tags"] if t["status"] == "failed"]
    assert failed and failed[0]["error"].startswith("permanent: deadline: the push of"), done.stdout
    assert "was cancelled (" in failed[0]["error"]
    assert proxy.held >= 1 and time.monotonic() - started < 180
