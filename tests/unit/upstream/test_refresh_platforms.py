"""The refresh names a variant for a platform only from wheels of that platform's machine.

PyPI's wheels of torch 2.7.1 to 2.10.0 are CUDA builds on x86_64 and CPU builds on aarch64, all
without a local label; a cpu variant for linux/amd64 needs an x86_64 CPU wheel, which only
PyTorch's own cpu index has. The indexes here are project pages made by the test (PEP 691 JSON,
as `parse_project_page` reads them) with the METADATA PyPI serves beside each wheel (PEP 658):
the same Requires-Dist on both machines, its NVIDIA pins marked for x86_64 only.
"""

from __future__ import annotations

import json
from pathlib import Path

from imagekit.upstream.metadata import read_compat
from imagekit.upstream.refresh import Proposal
from imagekit.upstream.run import refresh_matrix
from imagekit.upstream.simple_index import JSON_TYPE, IndexFile, parse_project_page

ROOT = Path(__file__).resolve().parents[3]
PYPI = "https://pypi.example/simple"
CPU_INDEX = "https://download.example/whl/cpu"
# torch 2.7.1's CUDA 12.6 pins as compat.yaml holds them (cuDNN 9.5.1.17, NCCL 2.26.2).
ON_X86 = 'platform_system == "Linux" and platform_machine == "x86_64"'
PYPI_REQUIRES = (
    "filelock",
    f"nvidia-cuda-runtime-cu12==12.6.77; {ON_X86}",
    f"nvidia-cudnn-cu12==9.5.1.17; {ON_X86}",
    f"nvidia-nccl-cu12==2.26.2; {ON_X86}",
    f"triton==3.3.1; {ON_X86}",
)
PYPI_WHEELS = (
    "torch-2.7.1-cp312-cp312-manylinux_2_28_x86_64.whl",  # CUDA 12.6, PyPI's default build
    "torch-2.7.1-cp312-cp312-manylinux_2_28_aarch64.whl",  # a CPU build
)
X86_CPU_WHEEL = "torch-2.7.1+cpu-cp312-cp312-manylinux_2_28_x86_64.whl"


def _metadata(filename: str, requires: tuple[str, ...]) -> str:
    version = filename.split("-")[1]
    lines = ["Metadata-Version: 2.1", "Name: torch", f"Version: {version}"]
    return "\n".join([*lines, *(f"Requires-Dist: {r}" for r in requires)]) + "\n"


class PagesIndex:
    """`PackageIndex` over project pages and METADATA texts held in memory."""

    def __init__(self, wheels: dict[str, dict[str, tuple[str, ...]]]) -> None:
        self.wheels = wheels  # index URL -> wheel file name -> its Requires-Dist

    def files(self, index: str, project: str) -> tuple[IndexFile, ...]:
        files = [
            {"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": "ab" * 32},
             "core-metadata": True}
            for name in self.wheels[index]
        ]  # fmt: skip
        page = {"meta": {"api-version": "1.1"}, "name": project, "files": files}
        url = f"{index}/{project}/"
        return parse_project_page(url, JSON_TYPE, json.dumps(page).encode())

    def metadata(self, file: IndexFile) -> str:
        return _metadata(file.filename, self.wheels[file.index.rsplit("/", 2)[0]][file.filename])


def _refresh(wheels: dict[str, dict[str, tuple[str, ...]]]) -> tuple[Proposal, str]:
    matrix = (ROOT / "matrix.yaml").read_text()
    compat_file = ROOT / "imagekit" / "data" / "compat.yaml"
    compat = read_compat(compat_file.read_text(), str(compat_file))
    proposal = refresh_matrix(PagesIndex(wheels), tuple(wheels), ("matrix.yaml", matrix), compat)
    return proposal, matrix


def test_pypis_aarch64_cpu_wheels_propose_no_cpu_variant_for_linux_amd64() -> None:
    proposal, _ = _refresh({PYPI: dict.fromkeys(PYPI_WHEELS, PYPI_REQUIRES)})

    assert proposal.findings == ()
    assert proposal.changed == ()
    assert proposal.text().startswith("nothing to propose")
    assert (
        "torch 2.7.1 cpu: the indexes hold its wheels for aarch64 only, none for linux/amd64; "
        "add the index that has them (--index)"
    ) in proposal.left_out


def test_an_x86_64_cpu_wheel_makes_the_cpu_variant_of_the_entry() -> None:
    proposal, before = _refresh({
        PYPI: dict.fromkeys(PYPI_WHEELS, PYPI_REQUIRES),
        CPU_INDEX: {X86_CPU_WHEEL: ("filelock",)},
    })  # fmt: skip

    [finding] = proposal.findings
    assert (finding.torch, finding.variant.name) == ("2.7.1", "cpu")
    assert finding.files == ("matrix.yaml",)
    assert X86_CPU_WHEEL in [w.filename for w in finding.variant.wheels]
    entry = '  - torch: "2.7.1"\n    cuda: ["11.8", "12.6", "12.8"]\n'
    assert proposal.changed == (
        ("matrix.yaml", before.replace(entry, entry.replace('"12.8"]', '"12.8", "cpu"]'))),
    )
    assert not [line for line in proposal.left_out if "cpu" in line]
