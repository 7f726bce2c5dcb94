"""Image labels and NVIDIA_* variables against the compatibility data."""

from __future__ import annotations

from pathlib import Path

from imagekit.build.render import RenderOptions, image_labels
from imagekit.matrix.compat import load_compat
from imagekit.matrix.load import load_matrix
from imagekit.verify.agreement import label_checks

CUDA_LOCAL = Path(__file__).resolve().parents[3] / "examples" / "cuda-local.yaml"
CPU = Path(__file__).resolve().parents[3] / "examples" / "cpu.yaml"
GOOD_ENV = {
    "NVIDIA_REQUIRE_CUDA": "cuda>=13.0",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "NVIDIA_VISIBLE_DEVICES": "all",
}


def cuda_labels() -> dict[str, str]:
    plan = load_matrix(CUDA_LOCAL).plans[0]
    return image_labels(plan, RenderOptions())


def failed(labels: dict[str, str], env: dict[str, str]) -> dict[str, str]:
    return {c.name: c.detail for c in label_checks(labels, env, load_compat()) if not c.ok}


def test_the_labels_imagekit_renders_agree_with_the_data() -> None:
    checks = label_checks(cuda_labels(), GOOD_ENV, load_compat())
    assert len(checks) == 6 and all(c.ok for c in checks), [c for c in checks if not c.ok]


def test_a_minimum_driver_copied_from_another_cuda_is_caught() -> None:
    labels = cuda_labels() | {"io.imagekit.min-driver": "570.26"}
    assert failed(labels, GOOD_ENV) == {
        "label min-driver agrees with the data": "label '570.26', data '580.65.06'"
    }


def test_a_missing_architecture_is_named() -> None:
    labels = cuda_labels()
    labels["io.imagekit.cuda-archs"] = labels["io.imagekit.cuda-archs"].replace("sm_90 ", "")
    assert "lacks ['sm_90']" in failed(labels, GOOD_ENV)["label cuda-archs agrees with the data"]


def test_nvidia_require_cuda_must_name_the_image_cuda() -> None:
    env = GOOD_ENV | {"NVIDIA_REQUIRE_CUDA": "cuda>=12.8"}
    assert list(failed(cuda_labels(), env)) == ["NVIDIA_REQUIRE_CUDA matches the CUDA of the image"]
    assert "NVIDIA_REQUIRE_CUDA matches the CUDA of the image" in failed(cuda_labels(), {})


def test_driver_capabilities_need_compute() -> None:
    env = GOOD_ENV | {"NVIDIA_DRIVER_CAPABILITIES": "utility"}
    assert list(failed(cuda_labels(), env)) == [
        "NVIDIA_DRIVER_CAPABILITIES include compute and utility"
    ]
    assert not failed(cuda_labels(), GOOD_ENV | {"NVIDIA_DRIVER_CAPABILITIES": "all"})


def test_an_unknown_torch_cuda_pair_asks_for_a_newer_imagekit() -> None:
    labels = cuda_labels() | {"io.imagekit.torch": "9.9.9"}
    (detail,) = failed(labels, GOOD_ENV).values()
    assert "torch 9.9.9" in detail and "update imagekit" in detail


def test_a_cpu_image_carries_no_cuda_labels() -> None:
    labels = image_labels(load_matrix(CPU).plans[0], RenderOptions())
    checks = label_checks(labels, {}, load_compat())
    assert [c.ok for c in checks] == [True]
    bad = failed(labels | {"io.imagekit.min-driver": "580.65.06"}, GOOD_ENV)
    assert (
        "found ['min-driver', 'NVIDIA_REQUIRE_CUDA']" in bad["a CPU image carries no CUDA labels"]
    )
