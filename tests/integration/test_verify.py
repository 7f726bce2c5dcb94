"""imagekit verify on a real engine: the CPU demo images, and images broken on purpose."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import docker
import jsonschema
import pytest

from imagekit.verify.wheel_files import CHECK_NAME as WHEEL_FILES
from tests.children import default_stop_signals
from tests.integration.conftest import ROOT, TEST_LABELS, DemoBuild, Session, imagekit

SLIM = "2.13.0-cpu-py3.11-slim"
FULL = "2.13.0-cpu-py3.11-full"
SCHEMA = json.loads((ROOT / "imagekit" / "data" / "results.schema.json").read_text())

HANG = """PROBE = {"name": "hang", "needs_gpu": False, "min_gpus": 0, "timeout_s": 5,
         "flavours": ["slim", "full"]}


def run(device, expected):
    import time

    time.sleep(3600)
"""

SELF_KILL = """PROBE = {"name": "selfkill", "needs_gpu": False, "min_gpus": 0, "timeout_s": 30,
         "flavours": ["slim", "full"]}


def run(device, expected):
    import os
    import signal

    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture
def probes_with(tmp_path: Path):
    """A copy of imagekit's probes plus extra probe files."""

    def make(**extra: str) -> Path:
        folder = tmp_path / "probes"
        shutil.copytree(ROOT / "probes", folder)
        for name, text in extra.items():
            (folder / f"{name}.py").write_text(text)
        return folder

    return make


def _checks(record: dict, probe: str) -> dict[str, dict]:
    result = next(r for r in record["verify"]["probes"] if r["probe"] == probe)
    return {c["name"]: c for c in result["checks"]}


def test_every_cpu_probe_passes_with_the_textbook_values(demo_verify: dict) -> None:
    run = demo_verify["run"]
    for name in (SLIM, FULL):
        record = json.loads((run / "images" / f"{name}.json").read_text())
        verify = record["verify"]
        assert verify["status"] == "pass" and verify["level"] == "cpu"
        # A CPU image has no GPU rung; its static rung is env, the structure and the labels.
        assert verify["levels"] == {"static": "pass", "cpu": "pass", "gpu": "n/a"}
        assert [c["name"] for c in verify["labels_agree"]] == ["a CPU image carries no CUDA labels"]
        statuses = {r["probe"]: r["status"] for r in verify["probes"]}
        expected = {
            "env": "pass",
            "cuda_stack": "skip",
            "autograd": "pass",
            "matmul": "pass",
            "higher_order": "pass",
            "compile": "pass",  # the demo's slim promises torch.compile too (compile: true)
            "ddp": "pass",
            "cudnn": "skip",
        }
        if name == FULL:
            expected["cuda_extension"] = "skip"  # a full-only probe; a CPU torch has no nvcc
        assert statuses == expected
        autograd = _checks(record, "autograd")
        assert autograd["dy/dx"]["detail"].startswith("expected 3.0, saw 3.0")
        assert autograd["dy/dw"]["detail"].startswith("expected 2.0, saw 2.0")
        assert autograd["dy/db"]["detail"].startswith("expected 1.0, saw 1.0")
        assert "AddBackward" in autograd["y.grad_fn is AddBackward"]["detail"]
        higher = _checks(record, "higher_order")
        assert higher["d2y/dx2 of x^3 at 1"]["detail"].startswith("expected 6.0, saw 6.0")
        env = _checks(record, "env")
        assert env["torch version"]["detail"] == "expected '2.13.0', saw '2.13.0'"
        assert env["runs as a non-root user"]["ok"]
        cudnn = next(r for r in verify["probes"] if r["probe"] == "cudnn")
        assert "needs a GPU" in cudnn["reason"]
        matmul = next(r for r in verify["probes"] if r["probe"] == "matmul")
        assert matmul["metrics"]["matmul_cold_ms"] > 0
        assert matmul["metrics"]["matmul_warm_median_ms"] > 0
        assert all(c["ok"] for c in verify["structure"])


def test_every_file_the_wheels_installed_is_in_slim_and_full(demo_verify: dict) -> None:
    """The wheel-files structure check passed on both images: slim's venv after pruning, full's
    after its overlay (pruned by itself) landed on slim's. The tornado test key full's build
    deleted is a removal on purpose, named; slim's torch/bin/protoc became a link."""
    run = demo_verify["run"]
    for name in (SLIM, FULL):
        record = json.loads((run / "images" / f"{name}.json").read_text())
        checks = {c["name"]: c for c in record["verify"]["structure"]}
        wheels = checks[WHEEL_FILES]
        assert wheels["ok"], wheels["detail"]
        assert " distributions as their wheels installed them (" in wheels["detail"]
        assert "linked to an identical copy" in wheels["detail"]
    key = "removed as private keys: lib/python3.11/site-packages/tornado/test/test.key"
    assert key in wheels["detail"]  # full's


def test_results_files_are_written_and_valid(demo_verify: dict, demo_build: DemoBuild) -> None:
    run = demo_verify["run"]
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for path in [*(run / "images").glob("*.json"), *(demo_build.run / "images").glob("*.json")]:
        errors = [
            f"{e.json_path}: {e.message}"
            for e in validator.iter_errors(json.loads(path.read_text()))
        ]
        assert errors == [], path
    run_json = json.loads((run / "run.json").read_text())
    assert run_json["engine"]["server_version"]
    junit = (run / "junit.xml").read_text()
    # slim: 8 probes, full: 9 (compile included), each image + structure + labels_agree;
    # skipped: cudnn and cuda_stack twice, cuda_extension once.
    assert 'tests="21"' in junit and 'failures="0"' in junit and 'skipped="5"' in junit
    summary = (run / "summary.md").read_text()
    assert f"| {SLIM} | linux/amd64 | cpu (static ok, cpu ok, gpu n/a) | pass |" in summary


def test_report_shows_the_run_and_compares_two(demo_verify: dict, demo_build: DemoBuild) -> None:
    shown = imagekit("report", str(demo_verify["run"]))
    assert shown.code == 0
    assert SLIM in shown.stdout and "pass" in shown.stdout
    compared = imagekit("report", str(demo_verify["run"]), str(demo_verify["run"]))
    assert compared.code == 0
    assert "0 changes for the worse" in compared.stderr


def _image_from(engine: docker.DockerClient, base: str, tag: str, lines: list[str]) -> str:
    # The session's test label first, so that every step's image carries it: the session
    # removes those too, not only the tagged one (the legacy builder on the containerd store
    # keeps each step as an image, and one was found left behind, untagged, after a full run).
    label = " ".join(f'{k}="{v}"' for k, v in TEST_LABELS.items())
    dockerfile = "\n".join([f"FROM {base}", f"LABEL {label}", *lines]) + "\n"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as archive:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        archive.addfile(info, io.BytesIO(dockerfile.encode()))
    context.seek(0)
    engine.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    return tag


def test_an_image_whose_labels_claim_another_torch_fails_env_with_both_values(
    demo_build: DemoBuild, engine: docker.DockerClient, session: Session, tmp_path: Path
) -> None:
    slim = demo_build.records[SLIM]["build"]["image_id"]
    tag = _image_from(
        engine, slim, f"{session.repository}:lying", ['LABEL io.imagekit.torch="2.12.1"']
    )
    result = imagekit(
        "verify", tag, "--probes", "env", "--no-structure", "--results", str(tmp_path), "--json"
    )
    assert result.code == 5
    record = json.loads(result.stdout)["images"]["pytorch_lying"]["verify"]
    env = record["probes"][0]
    assert env["status"] == "fail"
    check = next(c for c in env["checks"] if c["name"] == "torch version")
    assert check["detail"] == "expected '2.12.1', saw '2.13.0'"


def test_an_image_without_torch_errors_every_probe_and_the_run_completes(
    engine: docker.DockerClient, session: Session, demo_base: str, tmp_path: Path
) -> None:
    tag = _image_from(
        engine,
        demo_base,
        f"{session.repository}:no-torch",
        ['LABEL io.imagekit.torch="2.13.0" io.imagekit.flavour="slim"', "USER 1000:100"],
    )
    result = imagekit(
        "verify",
        tag,
        "--probes",
        "env,autograd,matmul",
        "--no-structure",
        "--results",
        str(tmp_path),
        "--json",
    )
    assert result.code == 5
    probes = json.loads(result.stdout)["images"]["pytorch_no-torch"]["verify"]["probes"]
    assert [p["status"] for p in probes] == ["error", "error", "error"]
    assert all("No module named 'torch'" in p["reason"] for p in probes)


def test_a_hanging_probe_times_out_and_its_container_is_removed(
    demo_build: DemoBuild, engine: docker.DockerClient, probes_with, tmp_path: Path
) -> None:
    folder = probes_with(hang=HANG)
    slim = f"{demo_build.records[SLIM]['build']['reference']}"
    started = time.monotonic()
    result = imagekit(
        "verify",
        slim,
        "--probes-dir",
        str(folder),
        "--probes",
        "autograd,hang",
        "--timeout-s",
        "20",
        "--no-structure",
        "--results",
        str(tmp_path),
        "--json",
    )
    elapsed = time.monotonic() - started
    assert result.code == 5
    record = json.loads(result.stdout)["images"]
    probes = next(iter(record.values()))["verify"]["probes"]
    assert [(p["probe"], p["status"]) for p in probes] == [
        ("autograd", "pass"),
        ("hang", "timeout"),
    ]
    assert "time limit in this probe" in probes[1]["reason"]
    assert elapsed < 20 + 10 + 30  # the limit, the kill grace, start-up and bookkeeping
    # This run's containers only: another imagekit run on the engine must not set it off.
    run_id = json.loads(result.stdout)["run_id"]
    mine = {"label": f"io.imagekit.run-id={run_id}"}
    assert engine.containers.list(all=True, filters=mine) == []


def test_a_probe_that_kills_its_process_is_an_error_not_a_pass(
    demo_build: DemoBuild, probes_with, tmp_path: Path
) -> None:
    folder = probes_with(selfkill=SELF_KILL)
    slim = demo_build.records[SLIM]["build"]["reference"]
    result = imagekit(
        "verify",
        slim,
        "--probes-dir",
        str(folder),
        "--probes",
        "selfkill,autograd",
        "--no-structure",
        "--results",
        str(tmp_path),
        "--json",
    )
    assert result.code == 5
    probes = next(iter(json.loads(result.stdout)["images"].values()))["verify"]["probes"]
    assert probes[0]["status"] == "error"
    assert "died (exit code 137)" in probes[0]["reason"]
    assert probes[1]["status"] == "error" and probes[1]["reason"].startswith("not reached")


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_keeps_finished_results_and_leaves_no_container(
    demo_build: DemoBuild,
    engine: docker.DockerClient,
    probes_with,
    tmp_path: Path,
    sig: int,
    code: int,
) -> None:
    folder = probes_with(hang=HANG)
    slim = demo_build.records[SLIM]["build"]["reference"]
    full = demo_build.records[FULL]["build"]["reference"]
    results = tmp_path / "results"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "imagekit",
            "verify",
            slim,
            full,
            "--probes-dir",
            str(folder),
            "--probes",
            "autograd,hang",
            "--timeout-s",
            "15",
            "--no-structure",
            "--results",
            str(results),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CI": "true"},
        preexec_fn=default_stop_signals,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(results.glob("*/images")) and time.monotonic() < deadline:
            time.sleep(0.2)
        # This run's containers only: another run on a shared engine must not set it off.
        mine = {"label": f"io.imagekit.run-id={next(results.glob('*/images')).parent.name}"}
        # The first image ends only when its hang probe times out: wait until the second
        # image's container runs, then interrupt.
        while time.monotonic() < deadline:
            running = engine.containers.list(filters=mine)
            if any(
                c.labels.get("io.imagekit.image") == "pytorch_2.13.0-cpu-py3.11-full"
                for c in running
            ):
                break
            time.sleep(0.5)
        else:
            pytest.fail("the second image never started")
        time.sleep(3)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, stderr[-2000:]
    records = list(results.glob("*/images/*.json"))
    assert [p.stem for p in records] == ["pytorch_2.13.0-cpu-py3.11-slim"]
    first = json.loads(records[0].read_text())["verify"]
    assert [p["status"] for p in first["probes"]] == ["pass", "timeout"]
    assert engine.containers.list(all=True, filters=mine) == []
