"""The CUDA example on a real engine: torch 2.14.1 for CUDA 13.0, built offline and verified
without a GPU (`make test-cuda`; not part of `make test`: it builds about 10 GB of images).

Also images broken on purpose, to show the static checks catch what they claim to catch.
"""

from __future__ import annotations

import io
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from imagekit.adapters.engine import DockerEngine
from tests.integration.conftest import ROOT, TEST_LABEL, TEST_LABELS, Session, imagekit

pytestmark = [pytest.mark.integration, pytest.mark.cuda]

CUDA_MATRIX = ROOT / "examples" / "cuda-local.yaml"
SLIM = "2.14.1-cu130-py3.11-slim"
FULL = "2.14.1-cu130-py3.11-full"
SITE = "/opt/venv/lib/python3.11/site-packages"


@pytest.fixture(scope="session")
def cuda_wheelhouse() -> Path:
    default = Path.home() / ".cache" / "imagekit" / "wheelhouse-cu130"  # as in the Makefile
    value = Path(os.environ.get("IMAGEKIT_CUDA_WHEELHOUSE") or default)
    if not (value / ".complete").is_file():
        pytest.fail(f"no complete CUDA wheelhouse at {value}; run `make wheelhouse-cuda`")
    return value


@dataclass
class CudaRun:
    matrix: Path
    results: Path
    repository: str
    verify: dict[str, dict]


def probe(record: dict, name: str) -> dict:
    return next(r for r in record["probes"] if r["probe"] == name)


@pytest.fixture(scope="session")
def cuda_run(
    tmp_path_factory: pytest.TempPathFactory,
    session: Session,
    cuda_wheelhouse: Path,
    demo_base: str,
) -> CudaRun:
    """The CUDA example built (slim, then full) and verified once."""
    folder = tmp_path_factory.mktemp("cuda")
    matrix = folder / "matrix.yaml"
    text = CUDA_MATRIX.read_text().replace("imagekit-demo/pytorch", session.repository)
    matrix.write_text(text.replace('"imagekit-base/debian:bookworm"', f'"{demo_base}"'))
    results = folder / "results"
    built = imagekit(
        "build", "--matrix", str(matrix), "--wheelhouse", str(cuda_wheelhouse),
        "--platform", "linux/amd64", "--results", str(results), "--json",
    )  # fmt: skip
    assert built.code == 0, built.stderr[-3000:]
    checked = imagekit(
        "verify", "--matrix", str(matrix), "--platform", "linux/amd64",
        "--results", str(results), "--json",
    )  # fmt: skip
    assert checked.code == 0, checked.stderr[-3000:]
    run = results / json.loads(checked.stdout)["run_id"]
    records = {p.stem: json.loads(p.read_text())["verify"] for p in (run / "images").glob("*.json")}
    return CudaRun(matrix, results, session.repository, records)


def test_both_cuda_images_reach_the_cpu_rung_and_say_the_gpu_rung_was_not_run(
    cuda_run: CudaRun,
) -> None:
    for name in (SLIM, FULL):
        record = cuda_run.verify[name]
        assert record["status"] == "pass", name
        assert record["levels"] == {"static": "pass", "cpu": "pass", "gpu": "not run"}, name
        assert record["level"] == "cpu"
        assert probe(record, "cudnn")["status"] == "skip"


def test_the_static_rung_proves_the_cuda_stack_on_a_cpu(cuda_run: CudaRun) -> None:
    facts = probe(cuda_run.verify[SLIM], "cuda_stack")["facts"]
    assert facts["cuda"] == "13.0"
    assert facts["cudnn_wheel"] == "nvidia-cudnn-cu13==9.24.0.43"
    assert facts["cudnn_library"] == "9.24.0"
    assert facts["nccl_wheel"] == "nvidia-nccl-cu13==2.30.7"
    assert facts["nccl_library"] == "2.30.7"
    assert {"sm_80", "sm_90", "sm_100", "sm_120"} <= set(facts["arch_flags"])
    assert facts["shared_libraries"] >= 50
    assert facts["stray_cudnn_nccl"] == []
    assert all("/site-packages/nvidia/" in p for p in facts["loaded_cudnn_nccl"])
    assert "libcuda.so.1" in facts["driver_libraries_expected_from_host"]
    env = probe(cuda_run.verify[SLIM], "env")["facts"]
    assert env["cudnn"] == "9.24.0" and env["nccl"] == "2.30.7"


def test_labels_agree_with_the_compatibility_data(cuda_run: CudaRun) -> None:
    for name in (SLIM, FULL):
        checks = cuda_run.verify[name]["labels_agree"]
        assert len(checks) == 6 and all(c["ok"] for c in checks), checks
        assert cuda_run.verify[name]["labels"]["io.imagekit.min-driver"] == "580.65.06"


def test_full_builds_a_cuda_extension_with_its_own_nvcc(cuda_run: CudaRun) -> None:
    result = probe(cuda_run.verify[FULL], "cuda_extension")
    assert result["status"] == "pass", result
    assert result["facts"]["nvcc"] == "13.0"
    assert result["metrics"]["extension_build_s"] > 0
    names = {c["name"]: c["ok"] for c in cuda_run.verify[FULL]["structure"]}
    assert names["full carries compilers"]  # gcc, g++, make and nvcc
    slim = {c["name"]: c for c in cuda_run.verify[SLIM]["structure"]}
    (compilers,) = (c for name, c in slim.items() if name.startswith("slim carries no compilers"))
    assert compilers["ok"]


def test_slim_leaves_triton_out_and_full_has_the_same_triton_back(
    cuda_run: CudaRun, engine: docker.DockerClient
) -> None:
    def python(image: str, code: str) -> str:
        out = engine.containers.run(
            f"{cuda_run.repository}:{image}", ["python3", "-c", code], remove=True, entrypoint=[]
        )
        return out.decode().strip()

    tag = "2.14.1-cuda13.0-cudnn9-py3.11"
    check = "import importlib.util as u; print(u.find_spec('triton') is not None)"
    assert python(f"{tag}-slim", check) == "False"
    left_out = python(f"{tag}-slim", "print(open('/opt/venv/imagekit-left-out.txt').read())")
    assert left_out == "triton==3.8.0"
    assert python(f"{tag}-full", "import triton; print(triton.__version__)") == "3.8.0"
    pruned = json.loads(
        python(f"{tag}-slim", "print(open('/opt/venv/imagekit-pruned.json').read())")
    )
    assert pruned["saved_bytes"] > 0


# Built FROM full, which has a compiler: a second cuDNN where the dynamic loader looks first, a
# library under nvidia/ whose dependency is gone (libcublasLt itself cannot go: torch would not
# import at all), and a label that lies.
BROKEN = """\
FROM {image}
USER 0:0
RUN cp {site}/nvidia/cudnn/lib/libcudnn.so.9 /usr/lib/x86_64-linux-gnu/libcudnn.so.9 \\
    && ldconfig \\
    && echo 'int gone(void) {{ return 1; }}' > /tmp/gone.c \\
    && gcc -shared -fPIC -o /tmp/libimagekitgone.so /tmp/gone.c \\
    && gcc -shared -fPIC -x c /dev/null -o {site}/nvidia/cu13/lib/libimagekit_broken.so.1 \\
        -L/tmp -Wl,--no-as-needed -limagekitgone \\
    && rm /tmp/libimagekitgone.so /tmp/gone.c
LABEL io.imagekit.min-driver="570.26" io.imagekit.test="{test_label}"
USER 1000:100
"""


def test_a_shadowing_cudnn_a_missing_library_and_a_false_label_are_each_caught(
    cuda_run: CudaRun, engine: docker.DockerClient, tmp_path: Path
) -> None:
    image = f"{cuda_run.repository}:2.14.1-cuda13.0-cudnn9-py3.11-full"
    broken = f"{cuda_run.repository}-broken/pytorch:cuda"
    dockerfile = BROKEN.format(image=image, site=SITE, test_label=TEST_LABELS[TEST_LABEL]).encode()
    engine.images.build(fileobj=io.BytesIO(dockerfile), tag=broken, rm=True, forcerm=True)
    result = imagekit(
        "verify", broken, "--probes", "env,cuda_stack", "--no-structure",
        "--results", str(tmp_path), "--json",
    )  # fmt: skip
    assert result.code == 5, result.stderr[-2000:]
    record = next(iter(json.loads(result.stdout)["images"].values()))["verify"]
    assert record["level"] == "none" and record["levels"]["static"] == "fail"
    checks = {c["name"]: c for c in probe(record, "cuda_stack")["checks"]}
    shadow = checks["no second cuDNN or NCCL can shadow the wheels'"]
    assert not shadow["ok"] and "/usr/lib/x86_64-linux-gnu/libcudnn.so.9" in shadow["detail"]
    resolve = checks["every shared library under torch/ and nvidia/ resolves"]
    assert not resolve["ok"]
    assert "nvidia/cu13/lib/libimagekit_broken.so.1" in resolve["detail"]
    assert "libimagekitgone.so" in resolve["detail"]
    labels = {c["name"]: c for c in record["labels_agree"]}
    assert not labels["label min-driver agrees with the data"]["ok"]
    # Everything else about the image is as it was.
    assert checks["torch is built for the CUDA of the label"]["ok"]


@pytest.fixture
def nvidia_smi(tmp_path: Path):
    def make(line: str) -> Path:
        script = tmp_path / "nvidia-smi"
        script.write_text(f"#!/bin/sh\necho '{line}'\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
        return script

    return make


def test_doctor_reads_the_labels_of_the_built_image(cuda_run: CudaRun, nvidia_smi) -> None:
    image = f"{cuda_run.repository}:2.14.1-cuda13.0-cudnn9-py3.11-slim"
    good = nvidia_smi("0, NVIDIA H200, 580.82.07, 9.0")
    ok = imagekit("doctor", "--image", image, "--nvidia-smi", str(good))
    # The image runs on this (faked) GPU and driver. Whether doctor passes also depends on the
    # engine: one without the NVIDIA runtime or CDI devices hands no GPU over, and says so.
    handover = DockerEngine(docker.from_env(version="auto")).info().gpu_mechanism != "none"
    assert ok.code == (0 if handover else 7), ok.stderr
    assert f"{image}: runs" in ok.stdout
    assert "GPU 0 (NVIDIA H200, sm_90) is compiled in" in ok.stdout
    assert handover or "neither the NVIDIA runtime nor CDI devices" in ok.stdout
    old = nvidia_smi("0, NVIDIA H200, 570.133.20, 9.0")
    refused = imagekit("doctor", "--image", image, "--nvidia-smi", str(old))
    assert refused.code == 7 and "too old for CUDA 13.0" in refused.stdout
