"""The CUDA example for linux/arm64 (GH200, GB200) on this x86_64 machine, under emulation
(`make test-arm64`; not part of `make test`: the emulated builds and probes take most of an
hour). Both platforms of both flavours are built and verified, then published to a local
registry under one tag each: an index of the amd64 and the arm64 image.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from imagekit.kernel.vocabulary import Platform
from imagekit.matrix.compat import load_compat
from tests.integration.conftest import ROOT, Session, imagekit
from tests.integration.engines import running_registry

pytestmark = [pytest.mark.integration, pytest.mark.arm64]

CUDA_MATRIX = ROOT / "examples" / "cuda-local.yaml"
TAG = "2.14.1-cuda13.0-cudnn9-py3.11"
ARM_SLIM, ARM_FULL = "2.14.1-cu130-py3.11-arm64-slim", "2.14.1-cu130-py3.11-arm64-full"
AMD_SLIM, AMD_FULL = "2.14.1-cu130-py3.11-slim", "2.14.1-cu130-py3.11-full"


def _folder(variable: str, default: str, make: str) -> Path:
    value = Path(os.environ.get(variable) or Path.home() / ".cache" / "imagekit" / default)
    if not (value / ".complete").is_file():
        pytest.fail(f"no complete wheelhouse at {value}; run `make {make}`")
    return value


def _image(engine: docker.DockerClient, variable: str, default: str, make: str) -> str:
    name = os.environ.get(variable, default)
    try:
        engine.images.get(name)
    except docker.errors.ImageNotFound:
        pytest.fail(f"base image {name} is missing; run `make {make}`")
    return name


@dataclass
class Arm64Run:
    repository: str
    registry: str
    verify: dict[str, dict]
    build: dict[str, dict]
    published: dict[str, dict]


def _records(results: Path, stdout: str, section: str) -> dict[str, dict]:
    run = results / json.loads(stdout)["run_id"]
    return {p.stem: json.loads(p.read_text())[section] for p in (run / "images").glob("*.json")}


@pytest.fixture(scope="session")
def arm64_run(
    tmp_path_factory: pytest.TempPathFactory, session: Session, engine: docker.DockerClient
) -> Iterator[Arm64Run]:
    """Both platforms of the example built, verified and published once."""
    amd_base = _image(engine, "IMAGEKIT_DEMO_BASE", "imagekit-base/debian:bookworm", "base")
    arm_base = _image(
        engine, "IMAGEKIT_ARM64_BASE", "imagekit-base/debian:bookworm-arm64", "base-arm64"
    )
    wheels = {
        "linux/amd64": _folder("IMAGEKIT_CUDA_WHEELHOUSE", "wheelhouse-cu130", "wheelhouse-cuda"),
        "linux/arm64": _folder(
            "IMAGEKIT_ARM64_WHEELHOUSE", "wheelhouse-cu130-arm64", "wheelhouse-arm64"
        ),
    }
    folder = tmp_path_factory.mktemp("arm64")
    text = CUDA_MATRIX.read_text().replace("imagekit-demo/pytorch", session.repository)
    text = text.replace('"imagekit-base/debian:bookworm"', f'"{amd_base}"')
    text = text.replace('"imagekit-base/debian:bookworm-arm64"', f'"{arm_base}"')
    matrix = folder / "matrix.yaml"
    matrix.write_text(text)
    results = folder / "results"
    build: dict[str, dict] = {}
    verify: dict[str, dict] = {}
    for platform, wheelhouse in wheels.items():
        built = imagekit(
            "build", "--matrix", str(matrix), "--platform", platform,
            "--wheelhouse", str(wheelhouse), "--results", str(results), "--json",
            timeout_s=5400,
        )  # fmt: skip
        assert built.code == 0, built.stderr[-3000:]
        build |= _records(results, built.stdout, "build")
        checked = imagekit(
            "verify", "--matrix", str(matrix), "--platform", platform,
            "--results", str(results), "--json", timeout_s=5400,
        )  # fmt: skip
        assert checked.code == 0, checked.stderr[-3000:]
        verify |= _records(results, checked.stdout, "verify")
    (folder / "registry").mkdir()
    with running_registry(folder / "registry") as host:
        done = imagekit(
            "publish", "--matrix", str(matrix), "--registry", host,
            "--results", str(results), "--json", timeout_s=3600,
        )  # fmt: skip
        assert done.code == 0, done.stderr[-3000:]
        published = {r["name"]: r for r in json.loads(done.stdout)["images"]}
        yield Arm64Run(session.repository, host, verify, build, published)


def probe(record: dict, name: str) -> dict:
    return next(r for r in record["probes"] if r["probe"] == name)


def test_both_arm64_images_reach_the_cpu_level_under_emulation(arm64_run: Arm64Run) -> None:
    for name in (ARM_SLIM, ARM_FULL):
        record = arm64_run.verify[name]
        assert record["status"] == "pass", name
        assert record["levels"] == {"static": "pass", "cpu": "pass", "gpu": "not run"}, name
        assert record["platform"].startswith(Platform.ARM64) and record["emulated"] is True
    for name in (AMD_SLIM, AMD_FULL):
        assert arm64_run.verify[name]["emulated"] is False
        assert arm64_run.verify[name]["platform"] == "linux/amd64"


def test_torch_compile_works_in_the_arm64_full_image_on_graces_instruction_set(
    arm64_run: Arm64Run,
) -> None:
    record = arm64_run.verify[ARM_FULL]
    # qemu emulates a Neoverse N2 (Grace's Armv9.0-A with 128-bit SVE2), not its `max` CPU.
    assert record["emulated_cpu"] == "neoverse-n2"
    compiled = probe(record, "compile")
    assert compiled["status"] == "pass", compiled["checks"]
    # Inductor compiled its C++ kernels for 128-bit SVE, as it does on a Grace.
    assert compiled["facts"]["isa_bit_width"] == 128, compiled["facts"]
    # slim carries no compiler and says so; its compile probe is skipped, not failed.
    assert probe(arm64_run.verify[ARM_SLIM], "compile")["status"] == "skip"


def test_the_arm64_cuda_stack_is_the_sbsa_build_for_grace_hopper_and_blackwell(
    arm64_run: Arm64Run,
) -> None:
    facts = probe(arm64_run.verify[ARM_SLIM], "cuda_stack")["facts"]
    assert facts["cuda"] == "13.0"
    assert facts["cudnn_wheel"] == "nvidia-cudnn-cu13==9.24.0.43"
    assert facts["nccl_wheel"] == "nvidia-nccl-cu13==2.30.7"
    # GH200 is sm_90 and GB200 sm_100; what the binary carries is what the data says.
    archs = load_compat().archs_for("2.14.1", "13.0", Platform.ARM64)
    assert {"sm_90", "sm_100"} <= set(facts["arch_flags"])
    assert set(facts["arch_flags"]) == set(archs)
    checks = arm64_run.verify[ARM_SLIM]["labels_agree"]
    assert all(c["ok"] for c in checks), checks
    labels = arm64_run.verify[ARM_SLIM]["labels"]
    assert labels["io.imagekit.cuda-archs"].split() == list(archs)
    assert labels["io.imagekit.platform"] == Platform.ARM64


def test_one_tag_per_image_names_an_index_of_both_platforms(arm64_run: Arm64Run) -> None:
    for flavour in ("slim", "full"):
        index = arm64_run.published[f"2.14.1-cu130-py3.11-{flavour}-index"]
        assert index["status"] == "published"
        shown = subprocess.run(
            [
                "docker", "manifest", "inspect", "--insecure",
                f"{arm64_run.registry}/{arm64_run.repository}:{TAG}-{flavour}",
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        platforms = sorted(
            m["platform"]["architecture"] for m in json.loads(shown.stdout)["manifests"]
        )
        assert platforms == ["amd64", "arm64"]
        for name in (f"2.14.1-cu130-py3.11-{flavour}", f"2.14.1-cu130-py3.11-arm64-{flavour}"):
            assert arm64_run.published[name]["status"] == "published", name


def test_image_sizes_are_recorded_per_platform(arm64_run: Arm64Run) -> None:
    sizes = {name: arm64_run.build[name]["size_bytes"] for name in arm64_run.build}
    for name in (ARM_SLIM, ARM_FULL, AMD_SLIM, AMD_FULL):
        assert sizes[name] > 1_000_000_000, name
    # Each flavour stays inside its budget on both platforms.
    assert sizes[ARM_SLIM] <= 5_000_000_000 and sizes[ARM_FULL] <= 7_000_000_000
