"""The compatibility data shipped with imagekit holds the gathered version facts.

The expectations below are the tables of the project's version facts (PyPI wheel metadata,
PyTorch's release matrix, CUDA's driver table), copied here by hand: a change to
imagekit/data/compat.yaml that contradicts them fails a test that names the fact.
"""

from __future__ import annotations

import pytest

from imagekit.matrix.compat import CompatData, load_compat, variant_tag, version_key
from imagekit.matrix.report import explain_cell

DATA = load_compat()


@pytest.fixture(scope="module")
def data() -> CompatData:
    return DATA


# A. PyPI default wheel per release (Linux x86_64, from each wheel's METADATA) -------------

# torch, default CUDA, cuDNN pin, NCCL pin, Python min, Python max, wheel platform, glibc floor
PYPI_DEFAULTS = [
    ("2.4.1", "12.1", "9.1.0.70", "2.20.5", "3.8", "3.12", "manylinux1", "2.5"),
    ("2.5.1", "12.4", "9.1.0.70", "2.21.5", "3.9", "3.13", "manylinux1", "2.5"),
    ("2.6.0", "12.4", "9.1.0.70", "2.21.5", "3.9", "3.13", "manylinux1", "2.5"),
    ("2.7.1", "12.6", "9.5.1.17", "2.26.2", "3.9", "3.13", "manylinux_2_28", "2.28"),
    ("2.8.0", "12.8", "9.10.2.21", "2.27.3", "3.9", "3.13", "manylinux_2_28", "2.28"),
    ("2.9.1", "12.8", "9.10.2.21", "2.27.5", "3.10", "3.14", "manylinux_2_28", "2.28"),
    ("2.10.0", "12.8", "9.10.2.21", "2.27.5", "3.10", "3.14", "manylinux_2_28", "2.28"),
    ("2.11.0", "13.0", "9.19.0.56", "2.28.9", "3.10", "3.14", "manylinux_2_28", "2.28"),
    ("2.12.1", "13.0", "9.20.0.48", "2.29.7", "3.10", "3.14", "manylinux_2_28", "2.28"),
    ("2.13.0", "13.0", "9.20.0.48", "2.29.7", "3.10", "3.14", "manylinux_2_28", "2.28"),
    ("2.14.1", "13.0", "9.24.0.43", "2.30.7", "3.10", "3.14", "manylinux_2_28", "2.28"),
    ("2.15.0", "13.2", "9.26.0.51", "2.30.7", "3.11", "3.15", "manylinux_2_28", "2.28"),
]
RELEASES = [row[0] for row in PYPI_DEFAULTS]


def test_data_knows_exactly_the_releases_of_the_facts(data: CompatData) -> None:
    assert data.torch_versions() == RELEASES


@pytest.mark.parametrize(
    ("torch", "cuda", "cudnn", "nccl", "py_min", "py_max", "platform", "glibc"),
    PYPI_DEFAULTS,
)
def test_pypi_default_wheel_matches_its_metadata(
    data: CompatData,
    torch: str,
    cuda: str,
    cudnn: str,
    nccl: str,
    py_min: str,
    py_max: str,
    platform: str,
    glibc: str,
) -> None:
    release = data.torch[torch]
    default = release.variants[release.pypi_default_cuda]
    assert (release.pypi_default_cuda, default.cudnn, default.nccl) == (cuda, cudnn, nccl)
    assert (release.python.min, release.python.max) == (py_min, py_max)
    assert str(release.python) == f"{py_min}-{py_max}"
    assert release.platform == platform
    assert data.glibc_floor(torch) == glibc
    assert default.inferred == (), "the default wheel's pins are read, never inferred"


# B. Every CUDA variant per release (PyTorch's release matrix) --------------------------

# torch, stable CUDA variants, experimental CUDA variants
VARIANTS = [
    ("2.4.1", ["11.8", "12.1"], ["12.4"]),
    ("2.5.1", ["11.8", "12.1", "12.4"], []),
    ("2.6.0", ["11.8", "12.4"], ["12.6"]),
    ("2.7.1", ["11.8", "12.6"], ["12.8"]),
    ("2.8.0", ["12.6", "12.8"], ["12.9"]),
    ("2.9.1", ["12.6", "12.8"], ["13.0"]),
    ("2.10.0", ["12.6", "12.8"], ["13.0"]),
    ("2.11.0", ["12.6", "12.8", "13.0"], []),
    ("2.12.1", ["12.6", "13.0"], ["13.2"]),
    ("2.13.0", ["12.6", "13.0"], ["13.2"]),
    ("2.14.1", ["12.6", "13.0", "13.2"], []),
    ("2.15.0", ["13.2"], []),
]


@pytest.mark.parametrize(("torch", "stable", "experimental"), VARIANTS)
def test_release_has_exactly_its_cuda_variants(
    data: CompatData, torch: str, stable: list[str], experimental: list[str]
) -> None:
    release = data.torch[torch]
    assert release.cuda_versions() == sorted(stable + experimental, key=version_key)
    flagged = [cuda for cuda, v in release.variants.items() if v.experimental]
    assert sorted(flagged, key=version_key) == experimental


@pytest.mark.parametrize("torch", RELEASES)
def test_every_release_has_a_cpu_variant(data: CompatData, torch: str) -> None:
    assert data.check_pair(torch, None) is None
    assert data.variant_choices(torch).endswith(" (and cpu)")


@pytest.mark.parametrize(("torch", "stable", "experimental"), VARIANTS)
def test_pypi_default_is_a_stable_variant(
    data: CompatData, torch: str, stable: list[str], experimental: list[str]
) -> None:
    assert data.torch[torch].pypi_default_cuda in stable


# torch, CUDA, cuDNN, NCCL per variant; None where the facts do not state the value, which
# the data must then mark as inferred (verify checks inferred values in the built image).
VARIANT_PINS = [
    ("2.4.1", "11.8", "9.1.0.70", None),
    ("2.4.1", "12.1", "9.1.0.70", "2.20.5"),
    ("2.4.1", "12.4", "9.1.0.70", None),
    ("2.5.1", "11.8", "9.1.0.70", None),
    ("2.5.1", "12.1", "9.1.0.70", None),
    ("2.5.1", "12.4", "9.1.0.70", "2.21.5"),
    ("2.6.0", "11.8", None, None),
    ("2.6.0", "12.4", "9.1.0.70", "2.21.5"),
    ("2.6.0", "12.6", "9.5.1.17", None),
    ("2.7.1", "11.8", "9.1.0.70", None),
    ("2.7.1", "12.6", "9.5.1.17", "2.26.2"),
    ("2.7.1", "12.8", "9.7.1.26", None),
    ("2.8.0", "12.6", "9.10.2.21", None),
    ("2.8.0", "12.8", "9.10.2.21", "2.27.3"),
    ("2.8.0", "12.9", "9.10.2.21", None),
    ("2.9.1", "12.6", "9.10.2.21", None),
    ("2.9.1", "12.8", "9.10.2.21", "2.27.5"),
    ("2.9.1", "13.0", "9.13.0.50", None),
    ("2.10.0", "12.6", "9.10.2.21", "2.27.5"),
    ("2.10.0", "12.8", "9.10.2.21", "2.27.5"),
    ("2.10.0", "13.0", "9.15.1.9", "2.28.9"),
    ("2.11.0", "12.6", "9.10.2.21", None),
    ("2.11.0", "12.8", None, None),
    ("2.11.0", "13.0", "9.19.0.56", "2.28.9"),
    ("2.12.1", "12.6", "9.10.2.21", "2.29.3"),
    ("2.12.1", "13.0", "9.20.0.48", "2.29.7"),
    ("2.12.1", "13.2", "9.20.0.48", "2.29.7"),
    ("2.13.0", "12.6", "9.10.2.21", "2.29.3"),
    ("2.13.0", "13.0", "9.20.0.48", "2.29.7"),
    ("2.13.0", "13.2", "9.20.0.48", "2.29.7"),
    ("2.14.1", "12.6", "9.10.2.21", "2.29.3"),
    ("2.14.1", "13.0", "9.24.0.43", "2.30.7"),
    ("2.14.1", "13.2", "9.24.0.43", "2.30.7"),
    ("2.15.0", "13.2", "9.26.0.51", "2.30.7"),
]


def test_pin_table_covers_every_variant(data: CompatData) -> None:
    in_data = {(t, c) for t, r in data.torch.items() for c in r.variants}
    assert {(t, c) for t, c, _, _ in VARIANT_PINS} == in_data


@pytest.mark.parametrize(("torch", "cuda", "cudnn", "nccl"), VARIANT_PINS)
def test_variant_pins_match_the_facts_or_are_marked_inferred(
    data: CompatData, torch: str, cuda: str, cudnn: str | None, nccl: str | None
) -> None:
    variant = data.torch[torch].variants[cuda]
    for field, stated in (("cudnn", cudnn), ("nccl", nccl)):
        if stated is None:
            assert field in variant.inferred, f"{field} is not in the facts: mark it inferred"
        else:
            assert getattr(variant, field) == stated
            assert field not in variant.inferred, f"{field} is a stated fact, not inferred"


def test_wheel_wins_where_the_release_matrix_disagrees(data: CompatData) -> None:
    release = data.torch["2.11.0"]
    assert release.variants["13.0"].cudnn == "9.19.0.56"
    assert "9.19.0.56" in release.note
    assert "9.17.1.4" in release.note


@pytest.mark.parametrize(
    ("cuda", "tag", "url"),
    [
        ("12.8", "cu128", "https://download.pytorch.org/whl/cu128"),
        ("11.8", "cu118", "https://download.pytorch.org/whl/cu118"),
        ("13.0", "cu130", "https://download.pytorch.org/whl/cu130"),
        (None, "cpu", "https://download.pytorch.org/whl/cpu"),
    ],
)
def test_wheel_index_url_follows_the_variant_tag(
    data: CompatData, cuda: str | None, tag: str, url: str
) -> None:
    assert variant_tag(cuda) == tag
    assert data.index_url_for(cuda) == url


# C. Minimum NVIDIA Linux driver per CUDA version ----------------------------------------

# CUDA, driver (GA), minor-version-compatibility floor
DRIVERS = [
    ("11.8", "520.61.05", "450.80.02"),
    ("12.1", "530.30.02", "525"),
    ("12.4", "550.54.14", "525"),
    ("12.6", "560.28.03", "525"),
    ("12.8", "570.26", "525"),
    ("12.9", "575.51.03", "525"),
    ("13.0", "580.65.06", "580"),
    ("13.1", "590.44.01", "580"),
    ("13.2", "595.45.04", "580"),
]


def test_data_knows_exactly_the_cuda_versions_of_the_facts(data: CompatData) -> None:
    assert sorted(data.cuda, key=version_key) == [row[0] for row in DRIVERS]


@pytest.mark.parametrize(("cuda", "min_driver", "compat_floor"), DRIVERS)
def test_cuda_minimum_driver(
    data: CompatData, cuda: str, min_driver: str, compat_floor: str
) -> None:
    facts = data.cuda[cuda]
    assert (facts.min_driver, facts.compat_driver_floor) == (min_driver, compat_floor)


def test_driver_from_a_secondary_source_says_so(data: CompatData) -> None:
    assert "secondary source" in data.cuda["13.2"].note


# D. GPU architectures ----------------------------------------------------------------

REMOVED_IN_CUDA_13 = ["sm_50", "sm_60", "sm_70"]  # Maxwell, Pascal, Volta


@pytest.mark.parametrize(("cuda", "_driver", "_floor"), DRIVERS)
def test_only_cuda_13_drops_maxwell_pascal_and_volta(
    data: CompatData, cuda: str, _driver: str, _floor: str
) -> None:
    dropped = set(data.cuda[cuda].dropped_archs)
    if cuda.startswith("13."):
        assert set(REMOVED_IN_CUDA_13) <= dropped
    else:
        assert dropped == set()


@pytest.mark.parametrize(("torch", "cuda", "_cudnn", "_nccl"), VARIANT_PINS)
def test_variant_builds_no_architecture_its_cuda_dropped(
    data: CompatData, torch: str, cuda: str, _cudnn: str | None, _nccl: str | None
) -> None:
    archs = data.torch[torch].variants[cuda].archs
    assert archs, f"torch {torch} cu{cuda} lists no GPU architectures"
    assert set(archs).isdisjoint(data.cuda[cuda].dropped_archs)


BLACKWELL = {"sm_100", "sm_120"}


def test_blackwell_builds_need_torch_2_7_and_cuda_12_8(data: CompatData) -> None:
    with_blackwell = [
        (torch, cuda)
        for torch, release in data.torch.items()
        for cuda, variant in release.variants.items()
        if BLACKWELL & set(variant.archs)
    ]
    assert with_blackwell, "no variant targets Blackwell"
    too_old = [
        (torch, cuda)
        for torch, cuda in with_blackwell
        if version_key(torch) < (2, 7) or version_key(cuda) < (12, 8)
    ]
    assert too_old == []


# torch, CUDA, first and last architecture of the build
ARCH_RANGES = [
    (torch, cuda, first, last)
    for torch in ("2.12.1", "2.13.0", "2.14.1")
    for cuda, first, last in (
        ("12.6", "sm_50", "sm_90"),
        ("13.0", "sm_75", "sm_120"),
        ("13.2", "sm_75", "sm_120"),
    )
]


@pytest.mark.parametrize(("torch", "cuda", "first", "last"), ARCH_RANGES)
def test_architecture_range_of_recent_builds(
    data: CompatData, torch: str, cuda: str, first: str, last: str
) -> None:
    archs = data.torch[torch].variants[cuda].archs
    assert (archs[0], archs[-1]) == (first, last)


# Sources ----------------------------------------------------------------------------

ROWS = [
    *((f"cuda {k}", v.sources) for k, v in DATA.cuda.items()),
    *((f"os {k}", v.sources) for k, v in DATA.os.items()),
    *((f"torch {k}", v.sources) for k, v in DATA.torch.items()),
]


@pytest.mark.parametrize(("row", "sources"), ROWS, ids=[row for row, _ in ROWS])
def test_every_row_cites_a_known_source(
    data: CompatData, row: str, sources: tuple[str, ...]
) -> None:
    assert sources, f"{row} cites no source"
    assert set(sources) <= set(data.sources)


@pytest.mark.parametrize("torch", RELEASES)
def test_release_cites_its_wheel_metadata_and_the_release_matrix(
    data: CompatData, torch: str
) -> None:
    assert {"wheel-metadata", "release-md"} <= set(data.torch[torch].sources)


@pytest.mark.parametrize("cuda", [row[0] for row in DRIVERS])
def test_cuda_row_cites_the_driver_table_and_the_compat_guide(data: CompatData, cuda: str) -> None:
    assert {"cuda-release-notes", "cuda-compat-guide"} <= set(data.cuda[cuda].sources)


def test_every_source_has_a_title_and_an_url(data: CompatData) -> None:
    for key, source in data.sources.items():
        assert source.title, key
        assert source.url.startswith("https://"), key


# What users read: the explanations -----------------------------------------------------

KNOWN = ", ".join(RELEASES)


@pytest.mark.parametrize(
    ("torch", "cuda", "why"),
    [
        ("2.8.0", "12.9", None),
        ("2.15.0", "13.2", None),
        ("2.8.0", None, None),
        (
            "2.8.0",
            "11.8",
            "torch 2.8.0 has no CUDA 11.8 build; it has 12.6, 12.8, 12.9 (and cpu)",
        ),
        ("2.15.0", "12.8", "torch 2.15.0 has no CUDA 12.8 build; it has 13.2 (and cpu)"),
        ("2.4.1", "13.0", "torch 2.4.1 has no CUDA 13.0 build; it has 11.8, 12.1, 12.4 (and cpu)"),
        (
            "2.10.0",
            "12.4",
            "torch 2.10.0 has no CUDA 12.4 build; it has 12.6, 12.8, 13.0 (and cpu)",
        ),
        ("2.3.0", "12.1", f"torch 2.3.0 is not a release imagekit knows; known releases: {KNOWN}"),
        ("2.8", None, f"torch 2.8 is not a release imagekit knows; known releases: {KNOWN}"),
    ],
)
def test_check_pair_explains(data: CompatData, torch: str, cuda: str | None, why: str) -> None:
    assert data.check_pair(torch, cuda) == why


@pytest.mark.parametrize(
    ("torch", "python", "why"),
    [
        ("2.4.1", "3.8", None),
        ("2.4.1", "3.12", None),
        ("2.9.1", "3.10", None),
        ("2.15.0", "3.15", None),
        ("2.4.1", "3.13", "torch 2.4.1 has no wheels for Python 3.13; it supports Python 3.8-3.12"),
        ("2.9.1", "3.9", "torch 2.9.1 has no wheels for Python 3.9; it supports Python 3.10-3.14"),
        (
            "2.15.0",
            "3.10",
            "torch 2.15.0 has no wheels for Python 3.10; it supports Python 3.11-3.15",
        ),
        ("2.8.0", "3.14", "torch 2.8.0 has no wheels for Python 3.14; it supports Python 3.9-3.13"),
    ],
)
def test_check_python_explains(data: CompatData, torch: str, python: str, why: str | None) -> None:
    assert data.check_python(torch, python) == why


GLIBC_TOO_OLD = (
    "ubuntu-18.04 has glibc 2.27 but the torch 2.7.1 wheels (manylinux_2_28) need "
    "glibc >= 2.28; use one of debian-12, debian-13, ubuntu-20.04, ubuntu-22.04, ubuntu-24.04"
)


@pytest.mark.parametrize(
    ("torch", "os_name", "python", "reasons"),
    [
        pytest.param("2.8.0", "ubuntu-24.04", "3.12", [], id="fits"),
        pytest.param("2.6.0", "ubuntu-18.04", "3.8", [], id="manylinux1-on-old-glibc"),
        pytest.param("2.7.1", "ubuntu-18.04", "3.8", [GLIBC_TOO_OLD], id="glibc-too-old"),
        pytest.param(
            "2.8.0",
            "debian-12",
            "3.12",
            ["debian-12 provides Python 3.11, not 3.12; Python 3.12 comes with ubuntu-24.04"],
            id="python-elsewhere",
        ),
        pytest.param(
            "2.15.0",
            "ubuntu-24.04",
            "3.15",
            ["ubuntu-24.04 provides Python 3.12, not 3.15"],
            id="python-nowhere",
        ),
        pytest.param(
            "2.7.1",
            "ubuntu-18.04",
            "3.12",
            [
                GLIBC_TOO_OLD,
                "ubuntu-18.04 provides Python 3.6, 3.7, 3.8, not 3.12; "
                "Python 3.12 comes with ubuntu-24.04",
            ],
            id="glibc-and-python",
        ),
        pytest.param(
            "2.8.0",
            "alpine-3.20",
            "3.12",
            [
                "unknown base OS 'alpine-3.20'; known: debian-12, debian-13, ubuntu-18.04, "
                "ubuntu-20.04, ubuntu-22.04, ubuntu-24.04"
            ],
            id="unknown-os",
        ),
    ],
)
def test_check_os_explains(
    data: CompatData, torch: str, os_name: str, python: str, reasons: list[str]
) -> None:
    assert data.check_os(torch, os_name, python) == reasons


@pytest.mark.parametrize(
    ("cuda", "archs", "why"),
    [
        ("12.6", ("sm_50", "sm_60", "sm_70", "sm_90"), None),
        (None, ("sm_60",), None),
        ("13.0", ("sm_75", "sm_80", "sm_90", "sm_100", "sm_120"), None),
        (
            "13.0",
            ("sm_80", "sm_70", "sm_60"),
            "CUDA 13.0 cannot target sm_60, sm_70 (removed in CUDA 13); "
            "those GPUs need a CUDA 12.x variant",
        ),
        (
            "13.2",
            ("sm_50",),
            "CUDA 13.2 cannot target sm_50 (removed in CUDA 13); "
            "those GPUs need a CUDA 12.x variant",
        ),
    ],
)
def test_check_archs_explains(
    data: CompatData, cuda: str | None, archs: tuple[str, ...], why: str | None
) -> None:
    assert data.check_archs(cuda, archs) == why


# explain_cell: what `imagekit compat explain` prints -------------------------------------


def test_explain_cell_derives_a_buildable_cell(data: CompatData) -> None:
    facts, reasons = explain_cell(data, "2.8.0", "12.8", "3.12", "ubuntu-24.04")
    assert reasons == []
    assert facts == {
        "torch": "2.8.0",
        "variant": "cu128",
        "python range": "3.9-3.13",
        "wheel platform": "manylinux_2_28",
        "glibc floor": "2.28",
        "index url": "https://download.pytorch.org/whl/cu128",
        "cuda": "12.8",
        "cudnn": "9.10.2.21",
        "nccl": "2.27.3",
        "min driver": "570.26",
        "compat floor": "525",
        "gpu archs": "sm_70 sm_75 sm_80 sm_86 sm_90 sm_100 sm_120",
        "python": "3.12",
        "os": "ubuntu-24.04",
    }


def test_explain_cell_marks_experimental_and_inferred_values(data: CompatData) -> None:
    facts, reasons = explain_cell(data, "2.9.1", "13.0", "3.12", "ubuntu-24.04")
    assert reasons == []
    assert facts["cuda"] == "13.0 (experimental)"
    assert facts["nccl"] == "2.27.5 (inferred)"


def test_explain_cell_of_a_cpu_cell_has_no_cuda_facts(data: CompatData) -> None:
    facts, reasons = explain_cell(data, "2.15.0", "cpu", "3.12", "ubuntu-24.04")
    assert reasons == []
    assert facts["variant"] == "cpu"
    assert facts["index url"] == "https://download.pytorch.org/whl/cpu"
    assert not {"cuda", "cudnn", "nccl", "min driver"} & set(facts)


def test_explain_cell_stops_at_a_cuda_variant_that_does_not_exist(data: CompatData) -> None:
    facts, reasons = explain_cell(data, "2.8.0", "11.8", "3.12", "ubuntu-24.04")
    assert facts == {"torch": "2.8.0", "cuda": "11.8"}
    assert reasons == ["torch 2.8.0 has no CUDA 11.8 build; it has 12.6, 12.8, 12.9 (and cpu)"]


def test_explain_cell_lists_every_reason(data: CompatData) -> None:
    facts, reasons = explain_cell(data, "2.15.0", "13.2", "3.10", "ubuntu-20.04")
    assert facts["variant"] == "cu132"
    assert reasons == [
        "torch 2.15.0 has no wheels for Python 3.10; it supports Python 3.11-3.15",
        "ubuntu-20.04 provides Python 3.8, 3.9, not 3.10; Python 3.10 comes with ubuntu-22.04",
    ]
