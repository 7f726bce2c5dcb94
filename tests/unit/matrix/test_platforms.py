"""linux/arm64 beside linux/amd64: from the compatibility data to the build of each platform.

The compatibility data says which torch/CUDA builds have aarch64 wheels (and where, and for
which GPUs); the matrix makes one cell per platform and reports a platform a build has no
wheels for where that platform is written (`file:line:col`, positions computed with `at()`
from the document itself); each platform's image keeps the published tag and is held on
the engine under that tag plus `-arm64`; its build context carries only the wheels and the
uv binary that run on its machine; a build refuses a base of another platform; verify reads
the labels against the platform's architectures; and `imagekit base bootstrap --arch arm64`
makes an arm64 base under emulation.

No engine, no network: the engine and builder are stand-ins, wheels are small files named
like real ones, and uv's wheel is a zip made here.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import os
import re
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from imagekit.adapters import baseimage, installer
from imagekit.adapters.baseimage import (
    bootstrap,
    emulation_problem,
    image_config,
    mmdebstrap_command,
)
from imagekit.adapters.contexts import write_folder
from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.installer import cache_root, foreign_installers, uv_for
from imagekit.adapters.results import RunFolder
from imagekit.build.bake import bake_file, target_name
from imagekit.build.context import (
    PLAN_FILE,
    ContextInputs,
    context_files,
    input_hash,
    wheel_runs_on,
)
from imagekit.build.outcome import platform_mismatch
from imagekit.build.ports import BuildOutcome, BuildRequest, LineSink
from imagekit.build.render import RenderOptions, image_labels, render_image
from imagekit.build.requests import BootstrapCommand, BuildSettings
from imagekit.build.run import BuildContexts, BuildRun
from imagekit.cli import app
from imagekit.errors import InputError
from imagekit.events import Event
from imagekit.kernel import labels as L
from imagekit.kernel.engine import EngineInfo, LocalImage
from imagekit.kernel.records import BuildRecord, BuildStatus
from imagekit.kernel.runtime import EMULATION_SLOWDOWN, NATIVE, Emulation, emulation_for
from imagekit.kernel.vocabulary import WHEEL_MACHINES, Platform, Runtime
from imagekit.matrix.compat import PYPI_SIMPLE, load_compat
from imagekit.matrix.load import Matrix, load_matrix, parse_matrix
from imagekit.matrix.plan import ImagePlan, platform_arch, platform_suffix
from imagekit.matrix.report import lint_refusal, plan_row, plan_rows, plans_table
from imagekit.matrix.schema import Defaults
from imagekit.matrix.shape_problems import FIELD_HINTS
from imagekit.verify.agreement import label_checks
from imagekit.verify.summary import platform_text
from tests.fakes import FakeEngine, image_id
from tests.matrixdoc import FILE, at, one_problem, problems, where

BUILT, FAILED, SKIPPED = BuildStatus.BUILT, BuildStatus.FAILED, BuildStatus.SKIPPED
ROOT = Path(__file__).resolve().parents[3]
AMD64, ARM64 = Platform.AMD64, Platform.ARM64
CUDA_LOCAL = ROOT / "examples" / "cuda-local.yaml"
CPU_EXAMPLE = ROOT / "examples" / "cpu.yaml"
DIGEST = "@sha256:" + "0123456789abcdef" * 4
UV_VERSION = importlib.metadata.version("uv")

# cuda-local.yaml's images and bases.
AMD_BASE, ARM_BASE = "imagekit-base/debian:bookworm", "imagekit-base/debian:bookworm-arm64"
AMD_SLIM, AMD_FULL = "2.14.1-cu130-py3.11-slim", "2.14.1-cu130-py3.11-full"
ARM_SLIM, ARM_FULL = "2.14.1-cu130-py3.11-arm64-slim", "2.14.1-cu130-py3.11-arm64-full"
REPO = "imagekit-demo/pytorch"
SLIM_TAG, FULL_TAG = "2.14.1-cuda13.0-cudnn9-py3.11-slim", "2.14.1-cuda13.0-cudnn9-py3.11-full"

# The architectures of torch 2.14.1's CUDA 13.0 wheels, per platform (compat.yaml).
X86_ARCHS = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
ARM_ARCHS = ("sm_80", "sm_90", "sm_100", "sm_110", "sm_120")

# A small valid matrix built for both platforms: one cell per platform, four images. Bases
# are pinned so that it loads without warnings; `releases` comes last so that a test can
# append an entry to it.
BASE = f"""\
schema_version: 1
repository: ghcr.io/acme/pytorch
bases:
  ubuntu-24.04: "ubuntu:24.04{DIGEST}"
defaults:
  os: ubuntu-24.04
  python: "3.12"
  platforms: [linux/amd64, linux/arm64]
flavours:
  slim:
    size_budget_bytes: 8000000000
  full:
    size_budget_bytes: 11000000000
latest:
  torch: "2.14.1"
  cuda: "13.0"
releases:
  - torch: "2.14.1"
    cuda: ["13.0"]
"""
ONE_BASE = f'  ubuntu-24.04: "ubuntu:24.04{DIGEST}"\n'
DEFAULT_PLATFORMS = "platforms: [linux/amd64, linux/arm64]"
ENTRY_CUDA = 'cuda: ["13.0"]'


# Helpers ---------------------------------------------------------------------------


def edit(old: str, new: str, text: str = BASE) -> str:
    """`text` with its one occurrence of `old` replaced by `new`."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


def parse(text: str) -> Matrix:
    return parse_matrix(text, FILE)


def with_bases(mapping: dict[str, str], text: str = BASE) -> str:
    """`text` whose one base is given per platform."""
    lines = "".join(f'    {platform}: "{image}"\n' for platform, image in mapping.items())
    return edit(ONE_BASE, f"  ubuntu-24.04:\n{lines}", text)


def two_pythons(text: str = BASE) -> str:
    """`text` on Ubuntu 22.04, which has Python 3.10 and 3.11."""
    text = edit(ONE_BASE, f'  ubuntu-22.04: "ubuntu:22.04{DIGEST}"\n', text)
    text = edit("os: ubuntu-24.04", "os: ubuntu-22.04", text)
    return edit('python: "3.12"', 'python: ["3.10", "3.11"]', text)


def aliases_of(matrix: Matrix) -> dict[str, tuple[str, ...]]:
    return {p.name: p.aliases for p in matrix.plans}


@pytest.fixture(scope="module")
def local() -> Matrix:
    return load_matrix(CUDA_LOCAL)


def plan_named(matrix: Matrix, name: str) -> ImagePlan:
    return next(p for p in matrix.plans if p.name == name)


# The compatibility data ----------------------------------------------------------------


def test_exactly_five_builds_have_arm64_wheels_all_from_pypi() -> None:
    data = load_compat()
    with_arm64 = {
        (torch, cuda): variant.arm64
        for torch, release in data.torch.items()
        for cuda, variant in release.variants.items()
        if variant.arm64 is not None
    }
    assert sorted(with_arm64) == [
        ("2.11.0", "13.0"),
        ("2.12.1", "13.0"),
        ("2.13.0", "13.0"),
        ("2.14.1", "13.0"),
        ("2.15.0", "13.2"),
    ]
    for (torch, _), build in with_arm64.items():
        assert build is not None
        assert build.index == "pypi"
        assert "pypi-aarch64" in build.sources
        assert build.archs == ARM_ARCHS
        # Read from torch 2.14.1's aarch64 wheel by verify (under emulation); the others
        # carry that reading until verify reads theirs.
        assert build.inferred == (() if torch == "2.14.1" else ("archs",))


def test_each_arm64_build_is_the_cuda_build_pypi_serves_for_that_release() -> None:
    # PyPI holds one build per torch version, so its aarch64 wheels can only be the
    # release's PyPI default CUDA: the one `torch==X` without an index gets.
    data = load_compat()
    for torch, release in data.torch.items():
        arm = [cuda for cuda, v in release.variants.items() if v.arm64 is not None]
        assert arm in ([], [release.pypi_default_cuda]), torch


@pytest.mark.parametrize(
    ("torch", "cuda", "platforms"),
    [
        ("2.14.1", "13.0", [AMD64, ARM64]),
        ("2.15.0", "13.2", [AMD64, ARM64]),
        ("2.14.1", "12.6", [AMD64]),
        ("2.14.1", "13.2", [AMD64]),
        ("2.12.1", "13.2", [AMD64]),
        ("2.9.1", "12.8", [AMD64]),
        ("2.14.1", None, [AMD64]),
        ("2.15.0", None, [AMD64]),
    ],
)
def test_platforms_of_a_build_put_amd64_first(
    torch: str, cuda: str | None, platforms: list[str]
) -> None:
    assert load_compat().platforms_of(torch, cuda) == platforms


def test_every_known_build_has_amd64_wheels_and_arm64_only_where_listed() -> None:
    data = load_compat()
    for torch, release in data.torch.items():
        for cuda in [None, *release.variants]:
            assert data.check_platform(torch, cuda, AMD64) is None, (torch, cuda)
            has_arm64 = cuda is not None and release.variants[cuda].arm64 is not None
            assert (data.check_platform(torch, cuda, ARM64) is None) is has_arm64, (torch, cuda)


@pytest.mark.parametrize(
    ("torch", "cuda", "expected"),
    [
        pytest.param(
            "2.14.1",
            "12.6",
            "imagekit's data knows no linux/arm64 wheels of torch 2.14.1 (CUDA 12.6); "
            "its linux/arm64 wheels are the CUDA 13.0 build",
            id="other-cuda",
        ),
        pytest.param(
            "2.14.1",
            None,
            "imagekit's data knows no linux/arm64 wheels of torch 2.14.1 (CPU); "
            "its linux/arm64 wheels are the CUDA 13.0 build",
            id="cpu",
        ),
        pytest.param(
            "2.12.1",
            "13.2",
            "imagekit's data knows no linux/arm64 wheels of torch 2.12.1 (CUDA 13.2); "
            "its linux/arm64 wheels are the CUDA 13.0 build",
            id="experimental-cuda",
        ),
        pytest.param(
            "2.9.1",
            "12.8",
            "imagekit's data knows no linux/arm64 wheels of torch 2.9.1 (CUDA 12.8); "
            "it knows none of torch 2.9.1",
            id="no-arm64-build",
        ),
    ],
)
def test_check_platform_names_the_build_that_has_arm64_wheels_or_says_none_is_known(
    torch: str, cuda: str | None, expected: str
) -> None:
    assert load_compat().check_platform(torch, cuda, ARM64) == expected


def test_arm64_architectures_cover_grace_hopper_and_grace_blackwell() -> None:
    data = load_compat()
    arm = data.archs_for("2.14.1", "13.0", ARM64)
    assert "sm_90" in arm  # GH200
    assert "sm_100" in arm  # GB200
    assert arm == ARM_ARCHS
    assert data.archs_for("2.14.1", "13.0", AMD64) == X86_ARCHS
    assert data.archs_for("2.15.0", "13.2", ARM64) == ARM_ARCHS


@pytest.mark.parametrize(
    ("cuda", "platform", "torch", "url"),
    [
        ("13.0", ARM64, "2.14.1", PYPI_SIMPLE),
        ("13.2", ARM64, "2.15.0", PYPI_SIMPLE),
        ("13.0", AMD64, "2.14.1", "https://download.pytorch.org/whl/cu130"),
        ("13.2", AMD64, "2.15.0", "https://download.pytorch.org/whl/cu132"),
        (None, AMD64, "2.14.1", "https://download.pytorch.org/whl/cpu"),
    ],
)
def test_index_url_on_a_platform(cuda: str | None, platform: str, torch: str, url: str) -> None:
    assert PYPI_SIMPLE == "https://pypi.org/simple"
    assert load_compat().index_url_on(cuda, platform, torch) == url


# The matrix: cells per platform ---------------------------------------------------------


def test_a_two_platform_entry_makes_one_cell_per_platform_with_its_wheels() -> None:
    matrix = parse(BASE)
    amd, arm = matrix.cells
    assert (amd.id, amd.platform) == ("2.14.1-cu130-py3.12", AMD64)
    assert (arm.id, arm.platform) == ("2.14.1-cu130-py3.12-arm64", ARM64)
    assert amd.shared_id == arm.shared_id == "2.14.1-cu130-py3.12"
    assert amd.base_image == arm.base_image == f"ubuntu:24.04{DIGEST}"  # one multi-platform ref
    assert (amd.archs, arm.archs) == (X86_ARCHS, ARM_ARCHS)
    assert (amd.index_url, arm.index_url) == ("https://download.pytorch.org/whl/cu130", PYPI_SIMPLE)
    assert amd.cudnn == arm.cudnn and amd.nccl == arm.nccl  # same Requires-Dist
    assert [p.name for p in matrix.plans] == [
        "2.14.1-cu130-py3.12-slim",
        "2.14.1-cu130-py3.12-full",
        "2.14.1-cu130-py3.12-arm64-slim",
        "2.14.1-cu130-py3.12-arm64-full",
    ]
    assert matrix.warnings == ()


def test_without_platforms_a_matrix_is_amd64_alone_and_keeps_its_names() -> None:
    assert Defaults(os="ubuntu-24.04").platforms == [AMD64]
    matrix = parse(edit(f"  {DEFAULT_PLATFORMS}\n", ""))
    (cell,) = matrix.cells
    assert (cell.id, cell.platform, cell.shared_id) == (
        "2.14.1-cu130-py3.12",
        AMD64,
        "2.14.1-cu130-py3.12",
    )


@pytest.mark.parametrize(
    ("platforms", "ids"),
    [
        ("[linux/arm64]", ["2.14.1-cu130-py3.12-arm64"]),
        ("[linux/amd64]", ["2.14.1-cu130-py3.12"]),
        ("[linux/arm64, linux/amd64]", ["2.14.1-cu130-py3.12-arm64", "2.14.1-cu130-py3.12"]),
    ],
)
def test_an_entry_platforms_override_the_defaults(platforms: str, ids: list[str]) -> None:
    doc = edit(ENTRY_CUDA, f"{ENTRY_CUDA}\n    platforms: {platforms}")
    assert [c.id for c in parse(doc).cells] == ids


def test_arm64_for_a_cuda_build_without_its_wheels_is_reported_at_the_platform() -> None:
    doc = edit(ENTRY_CUDA, 'cuda: ["12.6", "13.0"]')
    problem = one_problem(doc)
    assert where(problem) == at(doc, DEFAULT_PLATFORMS, "linux/arm64")
    assert problem.message == (
        "imagekit's data knows no linux/arm64 wheels of torch 2.14.1 (CUDA 12.6); "
        "its linux/arm64 wheels are the CUDA 13.0 build"
    )
    assert problem.hint == "build this platform for a variant that has its wheels, or drop it"


def test_arm64_for_a_cpu_build_is_reported_at_the_entry_that_lists_it() -> None:
    doc = edit(DEFAULT_PLATFORMS, "platforms: [linux/amd64]")
    doc = edit('cuda: "13.0"', 'cuda: "cpu"', doc)
    entry = "platforms: [linux/arm64, linux/amd64]"
    doc = edit(ENTRY_CUDA, f'cuda: ["cpu"]\n    {entry}', doc)
    problem = one_problem(doc)
    assert where(problem) == at(doc, entry, "linux/arm64")
    assert "linux/arm64 wheels of torch 2.14.1 (CPU)" in problem.message
    assert problem.message.endswith("its linux/arm64 wheels are the CUDA 13.0 build")


def test_a_platform_listed_twice_is_reported_at_its_second_item() -> None:
    listed = "platforms: [linux/arm64, linux/amd64, linux/arm64]"
    doc = edit(DEFAULT_PLATFORMS, listed)
    problem = one_problem(doc)
    assert problem.message == "platform linux/arm64 is listed twice"
    line, col = at(doc, listed)
    assert where(problem) == (line, col + listed.rindex("linux/arm64"))


@pytest.mark.parametrize("value", ["linux/s390x", "linux/arm64/v8", "arm64", "linux/AMD64"])
@pytest.mark.parametrize("in_entry", [False, True], ids=["defaults", "entry"])
def test_an_unknown_platform_is_a_shape_error_at_the_value(value: str, in_entry: bool) -> None:
    listed = f"platforms: [linux/amd64, {value}]"
    doc = (
        edit(ENTRY_CUDA, f"{ENTRY_CUDA}\n    {listed}")
        if in_entry
        else edit(DEFAULT_PLATFORMS, listed)
    )
    problem = one_problem(doc)
    assert where(problem) == at(doc, listed, value)
    assert problem.message == f"platforms: {value!r} is not {FIELD_HINTS['platforms']}"
    assert "linux/amd64 or linux/arm64" in FIELD_HINTS["platforms"]


def test_an_empty_platform_list_is_refused_where_it_is_written() -> None:
    doc = edit(DEFAULT_PLATFORMS, "platforms: []")
    problem = one_problem(doc)
    assert where(problem) == at(doc, "platforms: []", "[]")
    assert "at least 1 item" in problem.message


# The matrix: bases per platform -------------------------------------------------------


def test_a_bases_mapping_gives_each_platform_cell_its_own_base() -> None:
    doc = with_bases({AMD64: f"ubuntu:24.04{DIGEST}", ARM64: "arm64v8/ubuntu:24.04"})
    matrix = parse(doc)
    assert {c.platform: c.base_image for c in matrix.cells} == {
        AMD64: f"ubuntu:24.04{DIGEST}",
        ARM64: "arm64v8/ubuntu:24.04",
    }
    # The unpinned one is warned about at its own value.
    (warning,) = matrix.warnings
    assert warning.message == "base 'arm64v8/ubuntu:24.04' is not pinned by digest"
    assert where(warning) == at(doc, '"arm64v8/ubuntu:24.04"')


def test_a_bases_mapping_without_a_listed_platform_is_reported_at_that_platform() -> None:
    doc = with_bases({AMD64: f"ubuntu:24.04{DIGEST}"})
    problem = one_problem(doc)
    assert where(problem) == at(doc, DEFAULT_PLATFORMS, "linux/arm64")
    assert problem.message == "bases.ubuntu-24.04 names no image for linux/arm64"
    assert "add `linux/arm64: IMAGE` under bases.ubuntu-24.04" in problem.hint
    assert "imagekit base bootstrap --arch" in problem.hint


def test_a_bases_mapping_need_not_name_a_platform_no_entry_builds() -> None:
    doc = with_bases({AMD64: f"ubuntu:24.04{DIGEST}"})
    doc = edit(ENTRY_CUDA, f"{ENTRY_CUDA}\n    platforms: [linux/amd64]", doc)
    assert [(c.id, c.base_image) for c in parse(doc).cells] == [
        ("2.14.1-cu130-py3.12", f"ubuntu:24.04{DIGEST}")
    ]


def test_a_bad_image_in_a_bases_mapping_is_reported_at_its_value() -> None:
    doc = with_bases({AMD64: f"ubuntu:24.04{DIGEST}", ARM64: "Not An Image"})
    problem = one_problem(doc)
    assert where(problem) == at(doc, '"Not An Image"')
    assert problem.message == "'Not An Image' is not a valid image reference"


# The matrix: gpu_archs per platform -------------------------------------------------------


@pytest.mark.parametrize(
    ("archs", "platforms", "message"),
    [
        pytest.param(
            "[sm_75]",
            None,
            "torch 2.14.1 with CUDA 13.0 (linux/arm64) is not compiled for sm_75; "
            "it covers sm_80, sm_90, sm_100, sm_110, sm_120",
            id="x86-only-arch-on-arm64",
        ),
        pytest.param(
            "[sm_110]",
            None,
            "torch 2.14.1 with CUDA 13.0 is not compiled for sm_110; "
            "it covers sm_75, sm_80, sm_86, sm_90, sm_100, sm_120",
            id="arm64-only-arch-on-amd64",
        ),
        pytest.param("[sm_110]", "[linux/arm64]", None, id="thor-on-arm64-alone"),
        pytest.param("[sm_90, sm_100]", None, None, id="gh200-gb200-on-both"),
    ],
)
def test_gpu_archs_are_checked_against_the_wheels_of_each_platform(
    archs: str, platforms: str | None, message: str | None
) -> None:
    extra = f"\n    gpu_archs: {archs}"
    if platforms is not None:
        extra += f"\n    platforms: {platforms}"
    doc = edit(ENTRY_CUDA, ENTRY_CUDA + extra)
    if message is None:
        assert len(parse(doc).cells) == (1 if platforms else 2)
        return
    problem = one_problem(doc)
    assert problem.message == message
    assert where(problem) == at(doc, f"gpu_archs: {archs}", archs)


# The matrix: tags, latest and aliases --------------------------------------------------------


def test_a_tag_too_long_only_with_its_arm64_suffix_is_reported() -> None:
    # The versioned tag is 125 characters; the engine's arm64 copy would be 131.
    prefix = "x" * (128 - len("2.14.1-cuda13.0-cudnn9-py3.12-slim") - 3)
    doc = edit(
        "repository: ghcr.io/acme/pytorch\n",
        f'repository: ghcr.io/acme/pytorch\ntag_prefix: "{prefix}"\n',
    )
    found = problems(doc)
    assert sorted(p.message for p in found) == [
        f"tag '{prefix}2.14.1-cuda13.0-cudnn9-py3.12-{flavour}-arm64' is 131 characters long; "
        "Docker allows at most 128"
        for flavour in ("full", "slim")
    ]
    assert {where(p) for p in found} == {at(doc, f'"{prefix}"')}
    # Without arm64 the same prefix is fine.
    amd64_only = parse(edit(DEFAULT_PLATFORMS, "platforms: [linux/amd64]", doc))
    assert len(amd64_only.plans[0].tag) == 125


def test_latest_picks_one_image_and_both_platforms_get_its_aliases() -> None:
    matrix = parse(BASE)
    assert matrix.latest.id == "2.14.1-cu130-py3.12"
    assert aliases_of(matrix) == {
        "2.14.1-cu130-py3.12-slim": ("2.14-cuda13.0-slim", "latest-slim"),
        "2.14.1-cu130-py3.12-full": ("2.14-cuda13.0-full", "latest-full", "latest"),
        "2.14.1-cu130-py3.12-arm64-slim": ("2.14-cuda13.0-slim", "latest-slim"),
        "2.14.1-cu130-py3.12-arm64-full": ("2.14-cuda13.0-full", "latest-full", "latest"),
    }


def test_latest_of_an_arm64_only_matrix_is_its_arm64_cell() -> None:
    matrix = parse(edit(DEFAULT_PLATFORMS, "platforms: [linux/arm64]"))
    assert matrix.latest.id == "2.14.1-cu130-py3.12-arm64"
    assert aliases_of(matrix)["2.14.1-cu130-py3.12-arm64-full"] == (
        "2.14-cuda13.0-full",
        "latest-full",
        "latest",
    )


def test_latest_that_matches_two_pythons_counts_images_not_platform_cells() -> None:
    problem = one_problem(two_pythons())
    assert problem.message == ("latest matches 2 cells (2.14.1-cu130-py3.10, 2.14.1-cu130-py3.11)")
    assert problem.hint == "add `python:` to pick one"


def test_a_floating_alias_goes_to_every_platform_of_the_newest_python() -> None:
    doc = edit('cuda: "13.0"\n', 'cuda: "13.0"\n  python: "3.10"\n', two_pythons())
    matrix = parse(doc)
    assert matrix.latest.id == "2.14.1-cu130-py3.10"
    assert aliases_of(matrix) == {
        "2.14.1-cu130-py3.10-slim": ("latest-slim",),
        "2.14.1-cu130-py3.10-full": ("latest-full", "latest"),
        "2.14.1-cu130-py3.10-arm64-slim": ("latest-slim",),
        "2.14.1-cu130-py3.10-arm64-full": ("latest-full", "latest"),
        "2.14.1-cu130-py3.11-slim": ("2.14-cuda13.0-slim",),
        "2.14.1-cu130-py3.11-full": ("2.14-cuda13.0-full",),
        "2.14.1-cu130-py3.11-arm64-slim": ("2.14-cuda13.0-slim",),
        "2.14.1-cu130-py3.11-arm64-full": ("2.14-cuda13.0-full",),
    }


def test_a_floating_alias_never_joins_platforms_of_different_pythons() -> None:
    # 3.11 is built for amd64 only: its image owns the alias, and the alias (one index) is
    # not filled in for arm64 with the older Python's image.
    doc = edit('python: ["3.10", "3.11"]', 'python: "3.10"', two_pythons())
    doc = edit('cuda: "13.0"\n', 'cuda: "13.0"\n  python: "3.10"\n', doc)
    doc += '  - torch: "2.14.1"\n    cuda: ["13.0"]\n    python: ["3.11"]\n'
    doc += "    platforms: [linux/amd64]\n"
    found = aliases_of(parse(doc))
    owners = sorted(name for name, aliases in found.items() if "2.14-cuda13.0-slim" in aliases)
    assert owners == ["2.14.1-cu130-py3.11-slim"]
    assert found["2.14.1-cu130-py3.10-arm64-slim"] == ("latest-slim",)


# The matrix: selection ---------------------------------------------------------------


def test_select_by_platform(local: Matrix) -> None:
    assert [p.name for p in local.select(platform=ARM64)] == [ARM_SLIM, ARM_FULL]
    assert [p.name for p in local.select(platform=AMD64)] == [AMD_SLIM, AMD_FULL]
    assert [p.name for p in local.select(None, "full", platform=ARM64)] == [ARM_FULL]
    assert len(local.select()) == 4


def test_a_cell_id_selector_picks_every_platform_and_a_suffixed_one_only_arm64(
    local: Matrix,
) -> None:
    assert [p.name for p in local.select(["2.14.1-cu130-py3.11"])] == [
        AMD_SLIM,
        AMD_FULL,
        ARM_SLIM,
        ARM_FULL,
    ]
    assert [p.name for p in local.select(["2.14.1-cu130-py3.11-arm64"])] == [ARM_SLIM, ARM_FULL]
    # The published tag is one name for both platforms.
    assert [p.name for p in local.select([SLIM_TAG])] == [AMD_SLIM, ARM_SLIM]


def test_selecting_a_platform_the_matrix_does_not_build_names_the_option() -> None:
    cpu = load_matrix(CPU_EXAMPLE)
    with pytest.raises(InputError) as caught:
        cpu.select(platform=ARM64)
    assert caught.value.message.endswith("--flavour any --platform linux/arm64")
    assert caught.value.hint == f"cells in {CPU_EXAMPLE}: 2.13.0-cpu-py3.11"
    assert cpu.select(platform=ARM64, allow_empty=True) == []


# Plans: tags and references --------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "arch", "suffix"), [(AMD64, "amd64", ""), (ARM64, "arm64", "-arm64")]
)
def test_platform_arch_and_suffix(platform: str, arch: str, suffix: str) -> None:
    assert platform_arch(platform) == arch
    assert platform_suffix(platform) == suffix


def test_both_platforms_share_the_published_tag_and_differ_on_the_engine(local: Matrix) -> None:
    amd_slim, amd_full = plan_named(local, AMD_SLIM), plan_named(local, AMD_FULL)
    arm_slim, arm_full = plan_named(local, ARM_SLIM), plan_named(local, ARM_FULL)
    assert (arm_slim.platform, amd_slim.platform) == (ARM64, AMD64)
    assert arm_slim.tag == amd_slim.tag == SLIM_TAG
    assert arm_full.tag == amd_full.tag == FULL_TAG
    assert (amd_slim.local_tag, arm_slim.local_tag) == (SLIM_TAG, f"{SLIM_TAG}-arm64")
    assert arm_slim.reference == f"{REPO}:{SLIM_TAG}-arm64"
    assert arm_full.reference == f"{REPO}:{FULL_TAG}-arm64"
    assert amd_full.reference == f"{REPO}:{FULL_TAG}"
    # Each full is built FROM the slim of its own platform.
    assert arm_full.slim_reference == arm_slim.reference == arm_slim.slim_reference
    assert amd_full.slim_reference == amd_slim.reference


def test_an_arm64_image_renders_from_its_arm64_base_and_pypi(local: Matrix) -> None:
    arm_slim = render_image(plan_named(local, ARM_SLIM))
    amd_slim = render_image(plan_named(local, AMD_SLIM))
    assert arm_slim.build_args == {"BASE_IMAGE": ARM_BASE}
    assert amd_slim.build_args == {"BASE_IMAGE": AMD_BASE}
    assert f"--index-url {PYPI_SIMPLE} -r /tmp/imagekit/requirements.txt" in arm_slim.dockerfile
    assert "download.pytorch.org" not in arm_slim.dockerfile
    assert "--index-url https://download.pytorch.org/whl/cu130 -r" in amd_slim.dockerfile
    arm_full = render_image(plan_named(local, ARM_FULL))
    assert arm_full.build_args == {"SLIM_IMAGE": f"{REPO}:{SLIM_TAG}-arm64"}


# Build contexts: wheels and uv per machine --------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "machine", "runs"),
    [
        ("torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl", "aarch64", True),
        ("torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl", "x86_64", False),
        ("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", "x86_64", True),
        ("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", "aarch64", False),
        (
            "numpy-2.1.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
            "aarch64",
            True,
        ),
        ("six-1.17.0-py2.py3-none-any.whl", "aarch64", True),
        ("six-1.17.0-py2.py3-none-any.whl", "x86_64", True),
        ("pkg-1.0-cp311-cp311-macosx_11_0_arm64.whl", "aarch64", False),
        ("pkg-1.0-cp311-cp311-win_amd64.whl", "x86_64", False),
        ("pkg-1.0-cp311-cp311-linux_x86_64.whl", "x86_64", True),
    ],
)
def test_wheel_runs_on_a_machine_by_its_platform_tag(
    filename: str, machine: str, runs: bool
) -> None:
    assert wheel_runs_on(filename, machine) is runs


TORCH_ARM = "torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl"
TORCH_X86 = "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"
NUMPY_ARM = "numpy-2.1.0-cp311-cp311-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
PURE = "six-1.17.0-py2.py3-none-any.whl"


@dataclass
class TwoMachines:
    """A wheelhouse with wheels for both machines, and a uv binary for each."""

    inputs: ContextInputs
    wheels: Path
    host_uv: Path
    arm_uv: Path


@pytest.fixture
def two_machines(tmp_path: Path) -> TwoMachines:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in (TORCH_ARM, TORCH_X86, NUMPY_ARM, PURE):
        (wheels / name).write_bytes(name.encode())
    (wheels / ".complete").write_text("")
    host_uv, arm_uv = tmp_path / "uv-x86_64", tmp_path / "uv-aarch64"
    host_uv.write_bytes(b"uv for x86_64")
    arm_uv.write_bytes(b"uv for aarch64")
    inputs = ContextInputs(
        wheelhouse=wheels, installer=host_uv, foreign_installers=((ARM64, arm_uv),)
    )
    return TwoMachines(inputs, wheels, host_uv, arm_uv)


def context_of(plan: ImagePlan, out: Path, inputs: ContextInputs) -> Path:
    rendered = render_image(plan, RenderOptions(wheelhouse=True))
    return write_folder(out, plan.name, context_files(rendered, inputs))


def wheelhouse_of(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "wheelhouse").iterdir())


def test_an_arm64_slim_context_carries_the_arm64_uv_and_wheels_that_run_on_aarch64(
    local: Matrix, two_machines: TwoMachines, tmp_path: Path
) -> None:
    folder = context_of(plan_named(local, ARM_SLIM), tmp_path / "out", two_machines.inputs)
    assert wheelhouse_of(folder) == sorted([NUMPY_ARM, PURE, TORCH_ARM])
    assert (folder / "uv").read_bytes() == b"uv for aarch64"
    assert not [p for p in folder.rglob("*") if "@" in p.name]  # no `uv@linux/arm64` file
    plan_file = json.loads((folder / PLAN_FILE).read_text())
    assert plan_file["image"] == f"{REPO}:{SLIM_TAG}-arm64"
    assert plan_file["tag"] == SLIM_TAG


def test_an_amd64_slim_context_carries_this_machines_uv_and_no_aarch64_wheel(
    local: Matrix, two_machines: TwoMachines, tmp_path: Path
) -> None:
    folder = context_of(plan_named(local, AMD_SLIM), tmp_path / "out", two_machines.inputs)
    assert wheelhouse_of(folder) == sorted([PURE, TORCH_X86])
    assert (folder / "uv").read_bytes() == b"uv for x86_64"


def test_full_contexts_carry_no_uv_on_either_platform(
    local: Matrix, two_machines: TwoMachines, tmp_path: Path
) -> None:
    arm = context_of(plan_named(local, ARM_FULL), tmp_path / "out", two_machines.inputs)
    amd = context_of(plan_named(local, AMD_FULL), tmp_path / "out", two_machines.inputs)
    assert not (arm / "uv").exists() and not (amd / "uv").exists()
    assert wheelhouse_of(arm) == sorted([NUMPY_ARM, PURE, TORCH_ARM])
    assert wheelhouse_of(amd) == sorted([PURE, TORCH_X86])


def test_each_platforms_input_hash_follows_only_the_files_its_context_carries(
    local: Matrix, two_machines: TwoMachines
) -> None:
    options = RenderOptions(wheelhouse=True)
    names = [AMD_SLIM, ARM_SLIM, ARM_FULL]
    rendered = {n: render_image(plan_named(local, n), options) for n in names}

    def hashes() -> dict[str, str]:
        return {n: input_hash(r, two_machines.inputs) for n, r in rendered.items()}

    def changed_by(path: Path) -> set[str]:
        before = hashes()
        path.write_bytes(path.read_bytes() + b" v2")
        after = hashes()
        return {n for n in names if before[n] != after[n]}

    assert len(set(hashes().values())) == 3
    assert changed_by(two_machines.arm_uv) == {ARM_SLIM}
    assert changed_by(two_machines.host_uv) == {AMD_SLIM}
    assert changed_by(two_machines.wheels / TORCH_X86) == {AMD_SLIM}
    assert changed_by(two_machines.wheels / TORCH_ARM) == {ARM_SLIM, ARM_FULL}
    assert changed_by(two_machines.wheels / PURE) == set(names)


# Bake and reports ---------------------------------------------------------------------------


def test_bake_targets_name_their_platform_and_arm64_aliases_carry_the_suffix(
    local: Matrix, tmp_path: Path
) -> None:
    bake = bake_file([(render_image(p), tmp_path / p.name) for p in local.plans])
    targets = bake["target"]
    arm_full = targets[target_name(plan_named(local, ARM_FULL))]
    assert arm_full["platforms"] == [ARM64]
    assert arm_full["tags"] == [
        f"{REPO}:{FULL_TAG}-arm64",
        f"{REPO}:2.14-cuda13.0-full-arm64",
        f"{REPO}:latest-full-arm64",
        f"{REPO}:latest-arm64",
    ]
    assert arm_full["contexts"] == {
        f"{REPO}:{SLIM_TAG}-arm64": "target:2_14_1-cu130-py3_11-arm64-slim"
    }
    amd_full = targets[target_name(plan_named(local, AMD_FULL))]
    assert amd_full["platforms"] == [AMD64]
    assert amd_full["tags"][:2] == [f"{REPO}:{FULL_TAG}", f"{REPO}:2.14-cuda13.0-full"]
    assert amd_full["contexts"] == {f"{REPO}:{SLIM_TAG}": "target:2_14_1-cu130-py3_11-slim"}
    every_tag = [t for target in targets.values() for t in target["tags"]]
    assert len(every_tag) == len(set(every_tag)) == 14  # no two targets claim one tag


def test_plan_rows_and_the_table_show_the_platform(local: Matrix) -> None:
    row = plan_row(plan_named(local, ARM_SLIM))
    assert row["platform"] == ARM64
    assert row["tag"] == SLIM_TAG
    assert row["reference"] == f"{REPO}:{SLIM_TAG}-arm64"
    assert row["base"] == ARM_BASE
    assert plan_row(plan_named(local, AMD_SLIM))["platform"] == AMD64
    header, *rows = plans_table(list(local.plans)).splitlines()
    assert header.split() == [
        "IMAGE",
        "TORCH",
        "CUDA",
        "CUDNN",
        "NCCL",
        "PY",
        "OS",
        "PLATFORM",
        "TAG",
    ]
    assert [(r.split()[0], r.split()[7]) for r in rows] == [
        (AMD_SLIM, AMD64),
        (AMD_FULL, AMD64),
        (ARM_SLIM, ARM64),
        (ARM_FULL, ARM64),
    ]


def test_a_selected_platform_of_an_image_of_two_still_carries_its_candidate_suffix(
    local: Matrix,
) -> None:
    (row,) = plan_rows([plan_named(local, ARM_SLIM)], local.plans)
    assert row["candidate_suffix"] == "-arm64"
    assert plan_rows([plan_named(local, ARM_SLIM)], [])[0]["candidate_suffix"] == ""


def test_check_fails_only_on_failing_findings_and_names_where_to_fix_them() -> None:
    assert lint_refusal(0) is None
    error = lint_refusal(2)
    assert error is not None and "hadolint reported 2 problems" in error.format()
    assert "imagekit/data/hadolint.yaml" in error.format()


# Verify: labels against the platform's data ---------------------------------------------

GOOD_ENV = {
    "NVIDIA_REQUIRE_CUDA": "cuda>=13.0",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    "NVIDIA_VISIBLE_DEVICES": "all",
}
ARCHS_CHECK = "label cuda-archs agrees with the data"


def labels_of(matrix: Matrix, name: str) -> dict[str, str]:
    return image_labels(plan_named(matrix, name), RenderOptions())


@pytest.mark.parametrize("platform", [ARM64, "linux/arm64/v8"])
def test_arm64_labels_agree_with_the_arm64_data(local: Matrix, platform: str) -> None:
    labels = labels_of(local, ARM_SLIM)
    assert labels[L.CUDA_ARCHS].split() == list(ARM_ARCHS)
    checks = label_checks(labels, GOOD_ENV, load_compat(), platform)
    assert len(checks) == 6 and all(c.ok for c in checks), [c for c in checks if not c.ok]
    archs = next(c for c in checks if c.name == ARCHS_CHECK)
    assert archs.detail == f"{' '.join(ARM_ARCHS)} (torch 2.14.1 cu130, linux/arm64)"


@pytest.mark.parametrize(
    ("name", "platform", "detail"),
    [
        (ARM_SLIM, "", "label lacks ['sm_75', 'sm_86'], adds ['sm_110']"),
        (ARM_SLIM, AMD64, "label lacks ['sm_75', 'sm_86'], adds ['sm_110']"),
        (AMD_SLIM, ARM64, "label lacks ['sm_110'], adds ['sm_75', 'sm_86']"),
    ],
    ids=["arm64-labels-unsaid-platform", "arm64-labels-on-amd64", "amd64-labels-on-arm64"],
)
def test_labels_of_one_platform_read_on_another_fail_the_arch_check(
    local: Matrix, name: str, platform: str, detail: str
) -> None:
    checks = label_checks(labels_of(local, name), GOOD_ENV, load_compat(), platform)
    assert {c.name: c.detail for c in checks if not c.ok} == {ARCHS_CHECK: detail}


def test_a_build_without_arm64_wheels_fails_on_arm64_with_the_datas_reason(
    local: Matrix,
) -> None:
    labels = labels_of(local, AMD_SLIM) | {L.CUDA: "12.6"}
    data = load_compat()
    (check,) = label_checks(labels, GOOD_ENV | {"NVIDIA_REQUIRE_CUDA": "cuda>=12.6"}, data, ARM64)
    assert check.name == "the compatibility data knows this build on this platform"
    assert not check.ok
    assert check.detail == data.check_platform("2.14.1", "12.6", ARM64)


# Build: the base of another platform -------------------------------------------------------


def add_image(engine: FakeEngine, reference: str, platform: str) -> LocalImage:
    """Put an image of `platform` in the engine under `reference` and its id."""
    local = replace(engine.add(reference, image_id(reference + platform)), platform=platform)
    engine.images[reference] = engine.images[local.id] = local
    return local


class PlatformBuilder:
    """Builds at once; what it builds is of the platform it was asked for."""

    name = "fake"

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.requests: list[BuildRequest] = []

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildOutcome:
        self.requests.append(request)
        local = add_image(self.engine, request.reference, request.platform or "")
        return BuildOutcome(True, local.id, "built")


@dataclass
class Run:
    results: dict[str, BuildRecord]
    builder: PlatformBuilder

    def status(self) -> dict[str, str]:
        return {name: r.status for name, r in self.results.items()}


def run_build(
    tmp_path: Path, engine: FakeEngine, plans: list[ImagePlan], pull: bool = False
) -> Run:
    small_uv = tmp_path / "uv"
    small_uv.write_bytes(b"uv")
    contexts = BuildContexts(
        options=RenderOptions(),
        inputs=ContextInputs(installer=small_uv),
    )
    builder = PlatformBuilder(engine)
    events: list[Event] = []

    def sink(event: Event) -> None:
        events.append(event)

    run = RunFolder.create(tmp_path / "results")
    settings = BuildSettings(pull=pull)
    results = BuildRun(engine, builder, plans, settings, contexts, run, sink).execute()
    return Run({r.name: r for r in results}, builder)


def wrong_base_message(parent: str, found: str, wanted: str) -> str:
    arch = wanted.split("/")[1]
    return (
        f"the {parent} is {found}, not {wanted}: give bases a {wanted} image "
        f"(`bases: {{OS: {{{wanted}: IMAGE}}}}`, e.g. one `imagekit base bootstrap "
        f"--arch {arch}` makes)"
    )


def test_an_arm64_slim_on_an_amd64_base_fails_before_building_and_skips_its_full(
    tmp_path: Path, local: Matrix
) -> None:
    engine = FakeEngine()
    add_image(engine, AMD_BASE, AMD64)
    add_image(engine, ARM_BASE, AMD64)  # tagged as the arm64 base, but it is not
    done = run_build(tmp_path, engine, list(local.plans))
    assert done.status() == {AMD_SLIM: BUILT, AMD_FULL: BUILT, ARM_SLIM: FAILED, ARM_FULL: SKIPPED}
    assert done.results[ARM_SLIM].message == wrong_base_message("base image", AMD64, ARM64)
    assert done.results[ARM_FULL].message.startswith(
        "not built: its slim image failed (the base image is linux/amd64, not linux/arm64"
    )
    assert [r.name for r in done.builder.requests] == [AMD_SLIM, AMD_FULL]


def test_arm64_images_are_built_for_arm64_from_their_own_slim(
    tmp_path: Path, local: Matrix
) -> None:
    engine = FakeEngine()
    add_image(engine, AMD_BASE, AMD64)
    add_image(engine, ARM_BASE, "linux/arm64/v8")  # as the engine says it of a bootstrapped base
    done = run_build(tmp_path, engine, list(local.plans))
    assert set(done.status().values()) == {BUILT}
    requests = {r.name: r for r in done.builder.requests}
    assert requests[ARM_SLIM].platform == requests[ARM_FULL].platform == ARM64
    assert requests[AMD_SLIM].platform == requests[AMD_FULL].platform == AMD64
    assert requests[ARM_SLIM].reference == f"{REPO}:{SLIM_TAG}-arm64"
    assert requests[ARM_FULL].build_args == {"SLIM_IMAGE": f"{REPO}:{SLIM_TAG}-arm64"}
    assert requests[ARM_SLIM].build_args == {"BASE_IMAGE": ARM_BASE}


def test_an_arm64_full_on_an_amd64_slim_fails_before_building(
    tmp_path: Path, local: Matrix
) -> None:
    engine = FakeEngine()
    add_image(engine, f"{REPO}:{SLIM_TAG}-arm64", AMD64)
    done = run_build(tmp_path, engine, [plan_named(local, ARM_FULL)])
    assert done.status() == {ARM_FULL: FAILED}
    assert done.results[ARM_FULL].message == wrong_base_message("slim image", AMD64, ARM64)
    assert done.builder.requests == []


def test_on_an_x86_64_engine_only_the_arm64_builds_name_their_platform(
    tmp_path: Path, local: Matrix
) -> None:
    # A native build asks for no platform, as before platforms existed (Podman and the classic
    # builder differ in what they make of one); the engine did not say in the test above.
    engine = FakeEngine(facts=EngineInfo(server_version="fake", architecture="x86_64"))
    add_image(engine, AMD_BASE, AMD64)
    add_image(engine, ARM_BASE, ARM64)
    done = run_build(tmp_path, engine, list(local.plans))
    requests = {r.name: r.platform for r in done.builder.requests}
    assert requests == {AMD_SLIM: None, AMD_FULL: None, ARM_SLIM: ARM64, ARM_FULL: ARM64}


@dataclass
class PullingEngine(FakeEngine):
    """A fake engine that also records the platform each pull asks for."""

    pulled: list[tuple[str, str | None]] = field(default_factory=list)

    def pull(self, reference: str, platform: str | None = None) -> str:
        self.pulled.append((reference, platform))
        return super().pull(reference, platform)


def test_a_missing_arm64_base_is_pulled_for_arm64(tmp_path: Path, local: Matrix) -> None:
    engine = PullingEngine()
    engine.pullable[ARM_BASE] = LocalImage(
        image_id("arm64 base"), (ARM_BASE,), {}, 1, (), "2025-11-30", {}, ARM64
    )
    done = run_build(tmp_path, engine, [plan_named(local, ARM_SLIM)], pull=True)
    assert engine.pulled == [(ARM_BASE, ARM64)]
    assert done.status() == {ARM_SLIM: BUILT}


@pytest.mark.parametrize(
    ("found", "name", "expected"),
    [
        ("", ARM_SLIM, None),  # the engine did not say
        (ARM64, ARM_SLIM, None),
        ("linux/arm64/v8", ARM_FULL, None),
        (AMD64, AMD_SLIM, None),
        ("linux/arm64/v8", AMD_SLIM, wrong_base_message("base image", ARM64, AMD64)),
        (AMD64, ARM_FULL, wrong_base_message("slim image", AMD64, ARM64)),
    ],
)
def test_platform_mismatch(local: Matrix, found: str, name: str, expected: str | None) -> None:
    assert platform_mismatch(found, plan_named(local, name)) == expected


# uv for a machine this one emulates ------------------------------------------------------


def uv_wheel(
    folder: Path,
    machine: str,
    binary: bytes,
    version: str = UV_VERSION,
    member: str | None = None,
) -> Path:
    """A uv wheel for `machine` holding `binary` where the real one holds uv."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"uv-{version}-py3-none-manylinux_2_17_{machine}.manylinux2014_{machine}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member or f"uv-{version}.data/scripts/uv", binary)
        archive.writestr(f"uv-{version}.dist-info/METADATA", f"Name: uv\nVersion: {version}\n")
    return path


def sha16(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def test_uv_for_takes_the_binary_of_that_machine_out_of_its_wheel(tmp_path: Path) -> None:
    wheels, cache = tmp_path / "wheels", tmp_path / "cache"
    arm_wheel = uv_wheel(wheels, "aarch64", b"ELF aarch64 uv")
    x86_wheel = uv_wheel(wheels, "x86_64", b"ELF x86_64 uv")

    arm = uv_for(ARM64, wheels, cache)
    amd = uv_for(AMD64, wheels, cache)

    assert arm == cache / "uv" / f"{UV_VERSION}-aarch64-{sha16(arm_wheel)}" / "uv"
    assert amd == cache / "uv" / f"{UV_VERSION}-x86_64-{sha16(x86_wheel)}" / "uv"
    assert arm.read_bytes() == b"ELF aarch64 uv"
    assert amd.read_bytes() == b"ELF x86_64 uv"
    assert arm.stat().st_mode & 0o777 == 0o755
    assert sorted(p.name for p in arm.parent.iterdir()) == ["uv"]  # no temporary file left


def test_uv_for_reuses_its_cached_binary_until_the_wheel_changes(tmp_path: Path) -> None:
    wheels, cache = tmp_path / "wheels", tmp_path / "cache"
    uv_wheel(wheels, "aarch64", b"first")
    first = uv_for(ARM64, wheels, cache)
    first.write_bytes(b"kept")

    assert uv_for(ARM64, wheels, cache) == first
    assert first.read_bytes() == b"kept"  # not taken out again

    uv_wheel(wheels, "aarch64", b"second")  # another download of the same version
    second = uv_for(ARM64, wheels, cache)
    assert second != first
    assert second.read_bytes() == b"second"


@pytest.mark.parametrize(
    "setup",
    ["no-wheelhouse", "empty", "x86_64-only", "other-version"],
)
def test_uv_for_without_the_wheel_names_it_and_how_to_download_it(
    tmp_path: Path, setup: str
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    if setup == "x86_64-only":
        uv_wheel(wheels, "x86_64", b"x86")
    elif setup == "other-version":
        uv_wheel(wheels, "aarch64", b"old", version="0.0.1")
    given = None if setup == "no-wheelhouse" else wheels

    with pytest.raises(InputError) as caught:
        uv_for(ARM64, given, tmp_path / "cache")

    message, hint = caught.value.message, caught.value.hint
    assert f"needs uv {UV_VERSION} for aarch64" in message
    where_ = "no --wheelhouse was given" if given is None else str(wheels)
    assert message.endswith(f"no uv-{UV_VERSION}-*_aarch64.whl in the wheelhouse ({where_})")
    assert hint.startswith("pip download --no-deps --only-binary=:all: ")
    assert f"--platform manylinux_2_17_aarch64 uv=={UV_VERSION} -d WHEELHOUSE" in hint
    assert not (tmp_path / "cache").exists()


def test_uv_for_a_wheel_without_the_binary_says_to_download_it_again(tmp_path: Path) -> None:
    wheel = uv_wheel(
        tmp_path / "wheels", "aarch64", b"", member=f"uv-{UV_VERSION}.dist-info/RECORD"
    )
    with pytest.raises(InputError) as caught:
        uv_for(ARM64, tmp_path / "wheels", tmp_path / "cache")
    assert caught.value.message == f"{wheel} holds no uv-{UV_VERSION}.data/scripts/uv"
    assert caught.value.hint == "download the wheel again"
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


@pytest.mark.parametrize(("host", "foreign"), [("amd64", ARM64), ("arm64", AMD64)])
def test_foreign_installers_are_uv_for_the_platforms_this_machine_emulates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str, foreign: str
) -> None:
    monkeypatch.setattr(installer, "host_arch", lambda: host)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    wheels = tmp_path / "wheels"
    uv_wheel(wheels, WHEEL_MACHINES[foreign], b"foreign uv")

    # Only this machine's own platform: nothing to provide, no wheelhouse needed.
    assert foreign_installers([f"linux/{host}"], None) == ()
    ((platform, binary),) = foreign_installers([AMD64, ARM64, foreign], wheels)
    assert platform == foreign
    assert binary.read_bytes() == b"foreign uv"
    assert (tmp_path / "xdg" / "imagekit" / "uv") in binary.parents


def test_cache_root_follows_xdg_cache_home() -> None:
    assert cache_root({"XDG_CACHE_HOME": "/var/cache/me"}) == Path("/var/cache/me/imagekit")
    assert cache_root({}) == Path.home() / ".cache" / "imagekit"


# Base images for arm64 ---------------------------------------------------------------------

TAG = "imagekit-base/debian:bookworm-arm64"
CREATED = "2023-11-14T22:13:20Z"


@pytest.mark.parametrize(
    ("arch", "expected"), [(None, "amd64"), ("amd64", "amd64"), ("arm64", "arm64")]
)
def test_mmdebstrap_command_names_the_architecture(arch: str | None, expected: str) -> None:
    request = BootstrapCommand("bookworm", TAG)
    if arch is not None:
        request = replace(request, arch=arch)
    command = mmdebstrap_command(request, Path("r.tar"))
    assert [a for a in command if a.startswith("--architectures")] == [
        f"--architectures={expected}"
    ]
    assert command[-4:] == [
        "bookworm",
        "r.tar",
        "http://deb.debian.org/debian",
        "deb http://deb.debian.org/debian-security bookworm-security main",
    ]


def test_image_config_says_arm64_v8_and_amd64_without_a_variant() -> None:
    arm = json.loads(
        image_config(BootstrapCommand("bookworm", TAG, arch="arm64"), "ab" * 32, CREATED)
    )
    amd = json.loads(image_config(BootstrapCommand("bookworm", TAG), "ab" * 32, CREATED))
    assert (arm["architecture"], arm["variant"], arm["os"]) == ("arm64", "v8", "linux")
    assert amd["architecture"] == "amd64"
    assert "variant" not in amd
    assert {k: v for k, v in arm.items() if k not in ("architecture", "variant")} == {
        k: v for k, v in amd.items() if k != "architecture"
    }


@pytest.mark.parametrize(
    ("content", "ok"),
    [
        ("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POCF\n", True),
        ("disabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n", False),
        ("", False),
        (None, False),  # not registered at all
    ],
    ids=["enabled", "disabled", "empty", "missing"],
)
def test_emulation_problem_reads_the_qemu_aarch64_binfmt_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None, ok: bool
) -> None:
    monkeypatch.setattr(baseimage, "host_arch", lambda: "amd64")
    if content is not None:
        (tmp_path / "qemu-aarch64").write_text(content)
    found = emulation_problem("arm64", binfmt=tmp_path)
    if ok:
        assert found is None
    else:
        assert found == (
            f"this {os.uname().machine} machine cannot run arm64 programs: "
            f"{tmp_path / 'qemu-aarch64'} is not enabled"
        )


def test_no_emulation_is_needed_for_this_machines_own_architecture(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(baseimage, "host_arch", lambda: "arm64")
    assert emulation_problem("arm64", binfmt=tmp_path / "nothing") is None
    assert emulation_problem("amd64", binfmt=tmp_path / "nothing") is not None
    (tmp_path / "qemu-x86_64").write_text("enabled\n")
    assert emulation_problem("amd64", binfmt=tmp_path) is None


@pytest.mark.parametrize(
    ("image_platform", "engine", "cpu", "environment"),
    [
        # Grace's ISA (Armv9.0-A, SVE2 at 128 bits): on qemu's `max` CPU inductor compiles for
        # 256-bit SVE, which g++ 12 cannot (README, "arm64 under emulation").
        ("linux/arm64", "x86_64", "neoverse-n2", {"QEMU_CPU": "neoverse-n2"}),
        ("linux/arm64/v8", "x86_64", "neoverse-n2", {"QEMU_CPU": "neoverse-n2"}),
        # An architecture without a chosen CPU runs on qemu's default, saying nothing.
        ("linux/amd64", "aarch64", "", {}),
    ],
)
def test_an_emulated_run_asks_qemu_for_the_cpu_the_images_are_for(
    image_platform: str, engine: str, cpu: str, environment: dict[str, str]
) -> None:
    emulation = emulation_for(image_platform, engine)
    assert emulation == Emulation(
        emulated=True, cpu=cpu, slowdown=EMULATION_SLOWDOWN, environment=environment
    )


@pytest.mark.parametrize(
    ("image_platform", "engine"),
    [("linux/amd64", "x86_64"), ("linux/arm64", "aarch64"), ("linux/arm64", None), ("", "x86")],
)
def test_a_native_or_unknown_run_is_not_emulated_and_sets_nothing(
    image_platform: str, engine: str | None
) -> None:
    assert emulation_for(image_platform, engine) == NATIVE
    assert NATIVE.environment == {} and NATIVE.slowdown == 1


def test_the_report_names_the_emulated_cpu_of_an_emulated_run() -> None:
    def text(**fields: Any) -> str:
        record = SimpleNamespace(platform="linux/arm64", runtime=Runtime.DOCKER, **fields)
        return platform_text(record)  # type: ignore[arg-type]

    assert text(emulated=True, emulated_cpu="neoverse-n2") == "linux/arm64 (emulated neoverse-n2)"
    assert text(emulated=True, emulated_cpu="") == "linux/arm64 (emulated)"
    assert text(emulated=False, emulated_cpu="") == "linux/arm64"


class FakeApi:
    def __init__(self) -> None:
        self.loaded: bytes | None = None

    def load_image(self, data: Any, quiet: bool = False) -> Any:
        self.loaded = data.read()
        return iter([])


def fake_mmdebstrap(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Stand in for mmdebstrap (a tiny root filesystem); returns the commands it ran."""
    commands: list[list[str]] = []

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        commands.append(command)
        with tarfile.open(next(a for a in command if a.endswith(".tar")), "w") as archive:
            info = tarfile.TarInfo("etc/os-release")
            info.size = 10
            archive.addfile(info, io.BytesIO(b"ID=debian\n"))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr("imagekit.adapters.baseimage.shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr("imagekit.adapters.baseimage.subprocess.run", run)
    return commands


def loaded_config(api: FakeApi) -> dict[str, Any]:
    assert api.loaded is not None
    with tarfile.open(fileobj=io.BytesIO(api.loaded)) as archive:
        manifest = archive.extractfile("manifest.json")
        assert manifest is not None
        (entry,) = json.loads(manifest.read())
        config = archive.extractfile(entry["Config"])
        assert config is not None
        loaded: dict[str, Any] = json.loads(config.read())
        return loaded


def test_bootstrap_of_an_arm64_base_under_emulation_loads_an_arm64_image(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    monkeypatch.setattr(baseimage, "emulation_problem", lambda arch: asked.append(arch))
    commands = fake_mmdebstrap(monkeypatch)
    api = FakeApi()
    request = BootstrapCommand("bookworm", TAG, arch="arm64", source_date_epoch=1_700_000_000)

    arm_id = bootstrap(DockerEngine(SimpleNamespace(api=api)), request)  # type: ignore[arg-type]

    assert asked == ["arm64"]
    ((command,),) = [[c for c in cmd if c.startswith("--architectures")] for cmd in commands]
    assert command == "--architectures=arm64"
    config = loaded_config(api)
    assert (config["architecture"], config["variant"]) == ("arm64", "v8")
    amd_id = bootstrap(DockerEngine(SimpleNamespace(api=FakeApi())), replace(request, arch="amd64"))  # type: ignore[arg-type]
    assert amd_id != arm_id


def test_bootstrap_refuses_an_unknown_architecture_before_running_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commands = fake_mmdebstrap(monkeypatch)
    with pytest.raises(InputError) as caught:
        bootstrap(
            DockerEngine(SimpleNamespace(api=FakeApi())),
            BootstrapCommand("bookworm", TAG, arch="s390x"),
        )  # type: ignore[arg-type]
    assert caught.value.message == "unknown architecture 's390x'"
    assert caught.value.hint == "known: amd64, arm64"
    assert commands == []


def test_bootstrap_without_emulation_says_how_to_enable_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    commands = fake_mmdebstrap(monkeypatch)
    why = "this x86_64 machine cannot run arm64 programs: /proc/... is not enabled"
    monkeypatch.setattr(baseimage, "emulation_problem", lambda arch: why)
    with pytest.raises(InputError) as caught:
        bootstrap(
            DockerEngine(SimpleNamespace(api=FakeApi())),
            BootstrapCommand("bookworm", TAG, arch="arm64"),
        )  # type: ignore[arg-type]
    assert caught.value.message == why
    assert "qemu-user-static" in caught.value.hint and "binfmt-support" in caught.value.hint
    assert commands == []


# The command line ----------------------------------------------------------------------------

runner = CliRunner()


def test_matrix_command_lists_only_the_arm64_images_with_their_platform() -> None:
    result = runner.invoke(app, ["matrix", "--matrix", str(CUDA_LOCAL), "--platform", ARM64])
    assert result.exit_code == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert "PLATFORM" in header.split()
    assert [r.split()[0] for r in rows] == [ARM_SLIM, ARM_FULL]
    assert all(r.split()[header.split().index("PLATFORM")] == ARM64 for r in rows)
    assert result.stderr.strip() == f"{CUDA_LOCAL}: 2 cells, 2 images"


def test_matrix_command_json_for_amd64_has_only_amd64_rows() -> None:
    result = runner.invoke(
        app, ["matrix", "--matrix", str(CUDA_LOCAL), "--platform", AMD64, "--format", "json"]
    )
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(r["image"], r["platform"]) for r in rows] == [(AMD_SLIM, AMD64), (AMD_FULL, AMD64)]


def test_matrix_command_for_a_platform_the_matrix_lacks_exits_2_naming_it() -> None:
    result = runner.invoke(app, ["matrix", "--matrix", str(CPU_EXAMPLE), "--platform", ARM64])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "--platform linux/arm64" in result.stderr
    assert "2.13.0-cpu-py3.11" in result.stderr


def test_matrix_command_refuses_a_platform_it_does_not_build_for() -> None:
    result = runner.invoke(
        app, ["matrix", "--matrix", str(CUDA_LOCAL), "--platform", "linux/s390x"]
    )
    assert result.exit_code == 2
    assert result.stdout == ""
    # Click's usage error, which Rich may colour (under act it does): compare the bare text.
    plain = re.sub(r"\x1b\[[0-9;]*m", "", result.stderr)
    assert "--platform" in plain and "linux/s390x" in plain


def test_rendering_arm64_slim_on_x86_64_needs_the_aarch64_uv_wheel_but_full_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("imagekit.adapters.baseimage.host_arch", lambda: "amd64")
    base = ["render", "--matrix", str(CUDA_LOCAL), "--platform", ARM64, "--no-ca-cert"]
    # full installs with its slim's pip: it runs no uv, so no wheelhouse is needed for it.
    full = runner.invoke(app, [*base, "--flavour", "full", "--out", str(tmp_path / "full")])
    assert full.exit_code == 0, full.output
    assert (tmp_path / "full" / "2.14.1-cu130-py3.11-arm64-full" / "Dockerfile").is_file()
    slim = runner.invoke(app, [*base, "--flavour", "slim", "--out", str(tmp_path / "slim")])
    assert slim.exit_code == 2
    assert "building linux/arm64 on this" in slim.output
    assert "needs uv" in slim.output and "make wheelhouse-arm64" in slim.output


def test_the_ci_matrix_tells_each_platform_job_its_candidate_suffix() -> None:
    two = runner.invoke(app, ["matrix", "--matrix", str(CUDA_LOCAL), "--format", "github"])
    assert two.exit_code == 0, two.output
    rows = {r["image"]: r for r in json.loads(two.stdout)["include"]}
    assert rows["2.14.1-cu130-py3.11-slim"]["candidate_suffix"] == "-amd64"
    assert rows["2.14.1-cu130-py3.11-arm64-slim"]["candidate_suffix"] == "-arm64"
    assert rows["2.14.1-cu130-py3.11-arm64-slim"]["platform"] == ARM64
    one = runner.invoke(app, ["matrix", "--matrix", str(CPU_EXAMPLE), "--format", "github"])
    assert {r["candidate_suffix"] for r in json.loads(one.stdout)["include"]} == {""}
