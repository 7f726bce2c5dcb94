"""imagekit doctor: host facts from nvidia-smi, and the verdict for an image's labels."""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.adapters.hostgpu import parse_query, proc_driver_version, read_host
from imagekit.cli import app
from imagekit.doctor.verdict import (
    WARN,
    Finding,
    Gpu,
    HostGpus,
    arch_runs,
    assess,
    engine_findings,
    newest_cuda_for,
)
from imagekit.kernel.engine import EngineInfo
from imagekit.kernel.vocabulary import EngineName, ImageStore
from imagekit.matrix.compat import load_compat

ROOT = Path(__file__).resolve().parents[3]
CUDA_LOCAL = ROOT / "examples" / "cuda-local.yaml"
CPU = ROOT / "examples" / "cpu.yaml"
runner = CliRunner()

LABELS = {
    "io.imagekit.torch": "2.14.1",
    "io.imagekit.cuda": "13.0",
    "io.imagekit.min-driver": "580.65.06",
    "io.imagekit.cuda-archs": "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120",
}
H200 = Gpu(0, "NVIDIA H200", "9.0")


def host(driver: str | None, *gpus: Gpu) -> HostGpus:
    return HostGpus(driver, gpus, "test", () if driver else ("nvidia-smi is not installed",))


def verdict(labels: dict[str, str], on: HostGpus) -> tuple[str, list[str]]:
    found = assess("img", labels, on, load_compat())
    return found.verdict, [f"{f.level}: {f.text}" for f in found.findings]


def test_nvidia_smi_csv_is_parsed() -> None:
    text = "0, NVIDIA H200, 580.82.07, 9.0\n1, NVIDIA A100-SXM4-80GB, 580.82.07, 8.0\n"
    driver, gpus = parse_query(text)
    assert driver == "580.82.07"
    assert [g.arch for g in gpus] == ["sm_90", "sm_80"]
    assert parse_query("No devices were found\n") == (None, ())


def test_the_proc_file_gives_the_driver_when_nvidia_smi_is_absent() -> None:
    line = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 06:54:38 UTC 2025"
    assert proc_driver_version(line) == "580.65.06"


def test_a_new_enough_driver_and_a_compiled_gpu_run() -> None:
    state, findings = verdict(LABELS, host("580.82.07", H200))
    assert state == "runs", findings
    assert any("sm_90" in f and "compiled in" in f for f in findings)


def test_a_driver_below_the_minimum_but_above_the_compat_floor_runs_with_limits() -> None:
    state, findings = verdict(LABELS, host("580.00.01", H200))
    assert state == "runs with limits"
    assert any(f.startswith("warn:") and "minor-version compatibility" in f for f in findings)


def test_a_driver_too_old_is_refused_and_the_newest_cuda_it_runs_is_named() -> None:
    state, findings = verdict(LABELS, host("570.133.20", H200))
    assert state == "cannot use the GPUs here"
    assert any("needs >= 580.65.06" in f and "up to CUDA 12.8" in f for f in findings), findings
    assert newest_cuda_for("575.51.03", load_compat()) == "12.9"


def test_a_gpu_without_machine_code_in_the_image_is_refused() -> None:
    volta = Gpu(0, "Tesla V100-SXM2-32GB", "7.0")
    state, findings = verdict(LABELS, host("580.82.07", volta))
    assert state == "cannot use the GPUs here"
    assert any("sm_70" in f and "no machine code" in f for f in findings)


def test_same_major_newer_minor_runs_older_machine_code() -> None:
    assert arch_runs(Gpu(0, "RTX A6000", "8.6"), ["sm_80"]) == "sm_80"
    assert arch_runs(Gpu(0, "L40S", "8.9"), ["sm_80", "sm_86"]) == "sm_86"
    assert arch_runs(Gpu(0, "B200", "10.0"), ["sm_80", "sm_90"]) is None
    assert (
        arch_runs(Gpu(0, "H100", "9.0"), ["sm_90a"]) is None
    )  # arch-specific code is not portable


def test_without_a_gpu_a_cuda_image_is_told_so_and_a_cpu_image_runs() -> None:
    state, findings = verdict(LABELS, host(None))
    assert state == "no GPU here" and "needs an NVIDIA GPU" in findings[0]
    cpu = {"io.imagekit.torch": "2.13.0"}
    assert verdict(cpu, host(None))[0] == "runs"
    assert verdict({}, host(None))[0] == "unknown"


@pytest.fixture
def fake_smi(tmp_path: Path):
    def make(output: str, code: int = 0) -> Path:
        script = tmp_path / "nvidia-smi"
        script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {code}\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        return script

    return make


def test_read_host_runs_nvidia_smi(fake_smi) -> None:
    found = read_host(str(fake_smi("0, NVIDIA H200, 580.82.07, 9.0")))
    assert found.driver == "580.82.07" and found.gpus == (H200,)


def test_read_host_reports_why_there_is_no_gpu(fake_smi) -> None:
    found = read_host(str(fake_smi("NVIDIA-SMI has failed because it couldn't communicate", 9)))
    assert found.gpus == ()
    assert any("exited 9" in p and "couldn't communicate" in p for p in found.problems)


@pytest.fixture(autouse=True)
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """These tests are about the host and the images: no engine answers (a missing socket)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")


def test_doctor_checks_a_matrix_before_anything_is_built(fake_smi) -> None:
    smi = fake_smi("0, NVIDIA H200, 580.82.07, 9.0")
    result = runner.invoke(
        app,
        [
            "doctor", "--matrix", str(CUDA_LOCAL), "--platform", "linux/amd64",
            "--nvidia-smi", str(smi), "--json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["host"]["driver"] == "580.82.07"
    assert [i["verdict"] for i in data["images"]] == ["runs", "runs"]


def test_doctor_exits_7_when_the_driver_is_too_old(fake_smi) -> None:
    smi = fake_smi("0, NVIDIA H200, 570.133.20, 9.0")
    result = runner.invoke(
        app,
        [
            "doctor",
            "--matrix",
            str(CUDA_LOCAL),
            "--platform",
            "linux/amd64",
            "--nvidia-smi",
            str(smi),
        ],
    )
    assert result.exit_code == 7
    assert "FAIL driver 570.133.20 is too old for CUDA 13.0" in result.stdout
    assert "2 of 2 images cannot use this host's GPUs" in result.stderr


def test_doctor_says_an_arm64_image_gets_no_gpu_on_an_x86_64_host(
    fake_smi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    smi = fake_smi("0, NVIDIA H200, 580.82.07, 9.0")
    result = runner.invoke(
        app, ["doctor", "--matrix", str(CUDA_LOCAL), "--nvidia-smi", str(smi), "--json"]
    )
    assert result.exit_code == 7
    verdicts = {i["image"].rsplit(":", 1)[1]: i for i in json.loads(result.stdout)["images"]}
    assert verdicts["2.14.1-cuda13.0-cudnn9-py3.11-slim"]["verdict"] == "runs"
    arm = verdicts["2.14.1-cuda13.0-cudnn9-py3.11-slim-arm64"]
    assert arm["verdict"] == "cannot use the GPUs here"
    assert "runs only under emulation (qemu-user), without the GPU" in arm["findings"][0]["text"]


def test_doctor_without_a_gpu_says_so_and_a_cpu_matrix_passes(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-nvidia-smi"
    result = runner.invoke(app, ["doctor", "--matrix", str(CPU), "--nvidia-smi", str(missing)])
    assert result.exit_code == 0, result.output
    # An absence, not a failure: a CPU host exits 0, and says so without a FAIL line.
    assert "--   no NVIDIA GPU on this host (CPU images only)" in result.stdout
    assert "FAIL" not in result.stdout
    assert "a CPU image: it runs on any host" in result.stdout


def test_doctor_only_needs_a_matrix() -> None:
    result = runner.invoke(app, ["doctor", "--only", "x"])
    assert result.exit_code == 2 and "add --matrix FILE" in result.stderr


DOCKER_26 = EngineInfo(
    server_version="26.1.5",
    image_store=ImageStore.CONTAINERD,
    endpoint="unix:///var/run/docker.sock",
)
HOST = HostGpus("580.82.07", (H200,), "nvidia-smi")


def test_engine_findings_name_the_engine_its_store_and_how_ids_compare() -> None:
    found = engine_findings(DOCKER_26, HostGpus(None))
    assert found[0] == Finding(
        "ok",
        "engine: Docker 26.1.5 at unix:///var/run/docker.sock, containerd image store, GPUs: none",
    )
    assert "image ids on this engine are manifest digests" in found[1].text
    classic = EngineInfo(server_version="20.10.24", storage_driver="overlay2")
    assert "classic image store (overlay2)" in engine_findings(classic, HostGpus(None))[0].text
    assert "are config digests" in engine_findings(classic, HostGpus(None))[1].text


def test_a_host_with_a_driver_and_an_engine_without_a_gpu_mechanism_fails() -> None:
    found = engine_findings(DOCKER_26, HOST)
    assert found[-1].level == "fail" and "nvidia-ctk cdi generate" in found[-1].text
    cdi = replace(DOCKER_26, cdi_devices=("nvidia.com/gpu=0", "nvidia.com/gpu=all"))
    assert cdi.gpu_mechanism == "cdi" and cdi.gpu_runtime
    assert all(f.level == "ok" for f in engine_findings(cdi, HOST))
    assert "GPUs: CDI nvidia.com/gpu=0, nvidia.com/gpu=all" in engine_findings(cdi, HOST)[0].text
    runtime = replace(DOCKER_26, runtimes=("nvidia", "runc"))
    assert runtime.gpu_mechanism == "nvidia-runtime"
    assert all(f.level == "ok" for f in engine_findings(runtime, HOST))


def test_a_remote_engine_warns_that_the_gpu_facts_are_this_machines() -> None:
    remote = replace(DOCKER_26, endpoint="tcp://gpu-node:2375")
    found = engine_findings(remote, HOST)
    assert remote.remote and found[-1].level == "warn" and "not the engine's" in found[-1].text
    assert engine_findings(None, HOST, "no Docker engine answers")[0].level == "warn"


def test_doctor_exits_7_when_the_engine_cannot_hand_over_the_hosts_gpus(
    fake_smi, monkeypatch: pytest.MonkeyPatch
) -> None:
    import imagekit.adapters.maybe_engine as engine_adapter

    smi = fake_smi("0, NVIDIA H200, 580.82.07, 9.0")
    monkeypatch.setattr(engine_adapter, "engine_or_why", lambda: (DOCKER_26, ""))
    result = runner.invoke(app, ["doctor", "--matrix", str(CUDA_LOCAL), "--nvidia-smi", str(smi)])
    assert result.exit_code == 7, result.output
    assert "neither the NVIDIA runtime nor CDI devices" in result.stdout
    # A CPU matrix does not need the GPUs, so the engine's lack of them is no failure.
    result = runner.invoke(app, ["doctor", "--matrix", str(CPU), "--nvidia-smi", str(smi)])
    assert result.exit_code == 0, result.output
    with_cdi = replace(DOCKER_26, cdi_devices=("nvidia.com/gpu=all",))
    monkeypatch.setattr(engine_adapter, "engine_or_why", lambda: (with_cdi, ""))
    amd64 = ["--platform", "linux/amd64"]  # the example's arm64 images get no GPU on x86_64
    result = runner.invoke(
        app, ["doctor", "--matrix", str(CUDA_LOCAL), *amd64, "--nvidia-smi", str(smi)]
    )
    assert result.exit_code == 0, result.output
    assert "GPUs: CDI nvidia.com/gpu=all" in result.stdout


def test_a_rootless_engine_on_cgroup_v1_is_named_and_warned_about() -> None:
    rootless = EngineInfo(
        name=EngineName.PODMAN, server_version="4.3.1", rootless=True, cgroup_version="1"
    )
    found = engine_findings(rootless, HostGpus(None))
    assert found[0].text.startswith("engine: rootless Podman 4.3.1")
    assert any(f.level == WARN and "applies no memory or process limits" in f.text for f in found)
    rootful = EngineInfo(name=EngineName.PODMAN, server_version="4.3.1", cgroup_version="1")
    assert not any("limits" in f.text for f in engine_findings(rootful, HostGpus(None)))
