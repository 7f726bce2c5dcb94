"""kernel/labels.py: `ImageLabels.to_labels` writes what `ImageLabels.parse` reads, and back."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.build.render import content
from imagekit.kernel import labels as L
from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.vocabulary import Flavour, Platform
from imagekit.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parents[3]
MATRICES = [ROOT / "examples" / "cpu.yaml", ROOT / "tests" / "golden" / "matrix.yaml"]

EVERY_FIELD = ImageLabels(
    torch="2.14.1",
    python="3.12",
    flavour=Flavour.FULL,
    cell="2.14.1-cu130-py3.12-arm64",
    variant="cu130",
    os="debian-12",
    user="1000:100",
    glibc_floor="2.28",
    cuda="13.0",
    cudnn="9.13.0.50",
    nccl="2.27.7",
    min_driver="580.65.06",
    archs=("sm_90", "sm_100"),
    input_hash="sha256:" + "0" * 64,
    rdma=True,
    torch_compile=False,
    platform=Platform.ARM64,
    required_probes=("env", "ddp"),
    base_packages=("g++", "openssl"),
)


@pytest.mark.parametrize(
    "labels",
    [EVERY_FIELD, ImageLabels(), ImageLabels(torch="2.13.0", cuda=None, torch_compile=True)],
    ids=["every field", "none", "a cpu image"],
)
def test_parse_reads_back_what_to_labels_writes(labels: ImageLabels) -> None:
    assert ImageLabels.parse(labels.to_labels()) == labels


@pytest.mark.parametrize("matrix", MATRICES, ids=lambda m: m.name)
def test_every_plan_s_labels_read_back_as_its_content(matrix: Path) -> None:
    for plan in load_matrix(matrix).plans:
        written = content(plan).to_labels()
        assert ImageLabels.parse(written) == content(plan), plan.name
        assert written[L.SCHEMA] == "1" and written[L.FLAVOUR] == plan.flavour


def test_a_cpu_image_carries_no_cuda_label_and_an_absent_one_is_not_written() -> None:
    written = ImageLabels(torch="2.13.0", cudnn="9").to_labels()
    assert L.CUDA not in written and L.CUDNN not in written
    assert not {L.PLATFORM, L.RDMA, L.TORCH_COMPILE, L.INPUT_HASH} & set(written)
