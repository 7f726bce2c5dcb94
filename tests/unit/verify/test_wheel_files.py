"""The wheel-files check: each RECORD entry against what the venv holds and what the build's
prune reports say it did on purpose (imagekit.verify.wheel_files), over constructed facts."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from imagekit.adapters.structure import _wheel_files_checks
from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.vocabulary import Flavour
from imagekit.verify.wheel_files import (
    CHECK_NAME,
    FULL_REPORT,
    HEADERS_ARCHIVE,
    SLIM_REPORT,
    Digests,
    Distribution,
    Entry,
    Pruned,
    PruneReport,
    WheelFacts,
    judge,
    judge_entry,
    parse_facts,
    wheel_files_check,
)
from imagekit.verify.wheel_files import SCRIPT as WHEEL_FILES_SCRIPT

A = "sha256=" + "a" * 43
B = "sha256=" + "b" * 43
C = "sha256=" + "c" * 43
SITE = "lib/python3.11/site-packages"
LIB = f"{SITE}/torch/lib/libtorch_cpu.so"
HEADER = f"{SITE}/torch/include/ATen/ATen.h"
STATIC = f"{SITE}/nvidia/cu13/lib/libcupti_static.a"
KEY = f"{SITE}/tornado/test/test.key"

REPORT = PruneReport(
    stripped={LIB: 1000},
    stripped_sha256={LIB: Digests(before=A, after=B)},
    static_removed={STATIC: 5000},
    headers_packed={f"{SITE}/torch/include": 40_000},
    keys_removed=(KEY,),
)
PRUNED = Pruned.of([REPORT])


def entry(path: str = f"{SITE}/torch/__init__.py", **fields: str) -> Entry:
    return Entry.model_validate({"path": path, "hash": A, "kind": "file", "seen": A, **fields})


@pytest.mark.parametrize(
    ("case", "found", "holds"),
    [
        ("the file as installed", entry(), "installed"),
        (
            "a link to an identical file",
            entry(kind="link", target="libdup.so.12.4.1"),
            "linked",
        ),
        ("RECORD gives no hash, the file is there", entry(hash="", seen=""), "present"),
        ("stripped, its digests before and after recorded", entry(LIB, seen=B), "stripped"),
        (
            "stripped and then linked: the link's content is the stripped file's",
            entry(LIB, kind="link", target="libtorch_cpu.so.2", seen=B),
            "stripped",
        ),
        ("a header packed with RECORD's hash", entry(HEADER, kind="missing", packed=A), "packed"),
        (
            "a static archive with a shared twin",
            entry(STATIC, kind="missing"),
            "static archive removed",
        ),
        ("a private key the build deleted", entry(KEY, kind="missing"), "private key removed"),
    ],
)
def test_an_entry_holds(case: str, found: Entry, holds: str) -> None:
    judged = judge_entry(found, PRUNED)
    assert (judged.holds, judged.problem) == (holds, ""), case


@pytest.mark.parametrize(
    ("case", "found", "problem"),
    [
        ("a file gone", entry(kind="missing"), "is missing"),
        ("another hash", entry(seen=C), f"has {C}, RECORD says {A}"),
        (
            "a link to other bytes",
            entry(kind="link", target="libx.so.2", seen=C),
            f"is a link to libx.so.2 with {C}, RECORD says {A}",
        ),
        (
            "a dangling link",
            entry(kind="link", target="gone.so", seen=""),
            "is a link to gone.so, which is not a file",
        ),
        ("a folder where a file was", entry(kind="other", seen=""), "not a file or a link"),
        (
            "a header packed with another hash",
            entry(HEADER, kind="missing", packed=C),
            f"is in imagekit-headers.tar.gz with {C}, RECORD says {A}",
        ),
        (
            "a header missing from the archive its folder went to",
            entry(HEADER, kind="missing"),
            "its folder packed, and imagekit-headers.tar.gz lacks it",
        ),
        (
            "stripped, but from a file that was not RECORD's",
            entry(LIB, hash=C, seen=B),
            f"was stripped from {A}, not RECORD's {C}",
        ),
        (
            "stripped, and changed after stripping",
            entry(LIB, seen=C),
            f"has {C}, not the {B} stripping left",
        ),
        (
            "an unhashed entry gone",
            entry(f"{SITE}/pip/__pycache__/x.pyc", hash="", seen="", kind="missing"),
            "is missing",
        ),
    ],
)
def test_an_entry_fails_saying_why(case: str, found: Entry, problem: str) -> None:
    judged = judge_entry(found, PRUNED)
    assert judged.holds is None and problem in judged.problem, case


def test_a_stripped_file_with_no_digests_in_the_report_fails() -> None:
    """A report from before the digests were recorded: the bytes changed, nothing shows how."""
    pruned = Pruned.of([PruneReport(stripped={LIB: 1000})])
    judged = judge_entry(entry(LIB, seen=B), pruned)
    assert judged.holds is None
    assert judged.problem == "was stripped of debug sections, and the report has no digests"


def test_a_removal_the_report_does_not_name_is_a_loss() -> None:
    assert judge_entry(entry(STATIC, kind="missing"), Pruned.of([None])).problem == "is missing"


def facts(*dists: Distribution, left_out: tuple[str, ...] = (), full: bool = False) -> WheelFacts:
    reports = {"imagekit-pruned.json": REPORT.model_dump()}
    if full:
        reports["imagekit-pruned-full.json"] = {"stripped": {}, "keys_removed": []}
    return WheelFacts.model_validate(
        {
            "schema": 1,
            "venv": "/opt/venv",
            "distributions": [d.model_dump() for d in dists],
            "reports": reports,
            "left_out": list(left_out),
            "bytes_hashed": 2_500_000_000,
            "seconds": 3.25,
        }
    )


def dist(name: str, version: str, *entries: Entry) -> Distribution:
    return Distribution(
        name=name,
        version=version,
        record=f"{SITE}/{name}-{version}.dist-info/RECORD",
        entries=entries,
    )


TORCH = dist(
    "torch",
    "2.13.0",
    entry(),
    entry(LIB, seen=B),
    entry(HEADER, kind="missing", packed=A),
    entry(f"{SITE}/torch/lib/libc10.so", kind="link", target="libc10.so.2"),
    entry(f"{SITE}/torch-2.13.0.dist-info/RECORD", hash="", seen=""),
)
NVIDIA = dist("nvidia-cuda-cupti", "13.0.85", entry(STATIC, kind="missing"))


def test_a_venv_as_installed_passes_and_says_what_the_build_changed() -> None:
    check = wheel_files_check(facts(TORCH, NVIDIA), Flavour.SLIM)
    assert check.name == CHECK_NAME and check.ok, check.detail
    assert check.detail == (
        "6 files of 2 distributions as their wheels installed them (1 stripped of debug "
        "sections; 1 linked to an identical copy; 1 packed in imagekit-headers.tar.gz; "
        "1 present, RECORD giving no hash; 1 removed as static archives with a shared twin: "
        f"{STATIC}); 2,500 MB hashed in 3.2 s"
    )


def test_a_failure_names_the_distribution_and_the_file() -> None:
    broken = dist("numpy", "2.4.6", entry(f"{SITE}/numpy/core.so", seen=C), entry(kind="missing"))
    check = wheel_files_check(facts(TORCH, broken), Flavour.SLIM)
    assert not check.ok
    assert check.detail.startswith("2 not as the wheels installed them, in 7 files of 2 ")
    # One failure from the next by "; ": a failure's own text has commas.
    assert (
        f"numpy 2.4.6: {SITE}/numpy/core.so has {C}, RECORD says {A}; "
        f"numpy 2.4.6: {SITE}/torch/__init__.py is missing ("
    ) in check.detail


def test_a_file_two_wheels_ship_holds_with_either_ones_content() -> None:
    shared = f"{SITE}/nvidia/cu13/__init__.py"
    first = dist("nvidia-cublas", "13.1.0", entry(shared, hash=A, seen=B))
    second = dist("nvidia-cudnn-cu13", "9.13.0", entry(shared, hash=B, seen=B))
    verdict = judge(facts(first, second), Flavour.SLIM)
    assert verdict.ok and verdict.held == {"installed over": 1, "installed": 1}
    stranger = dist("other", "1.0", entry(shared, hash=A, seen=C))
    assert not judge(facts(stranger, second), Flavour.SLIM).ok


def test_private_keys_the_build_deleted_are_named() -> None:
    tornado = dist("tornado", "6.6.1", entry(KEY, kind="missing"))
    check = wheel_files_check(facts(tornado, full=True), Flavour.FULL)
    assert check.ok and f"1 removed as private keys: {KEY}" in check.detail


def test_what_slim_leaves_out_is_named_and_must_be_absent() -> None:
    check = wheel_files_check(facts(TORCH, left_out=("triton==3.8.0",)), Flavour.SLIM)
    assert check.ok and "left out of slim: triton==3.8.0" in check.detail
    triton = dist("triton", "3.8.0", entry(f"{SITE}/triton/__init__.py"))
    verdict = judge(facts(TORCH, triton, left_out=("triton==3.8.0",)), Flavour.SLIM)
    assert verdict.failures == ("triton==3.8.0: left out of slim, yet triton 3.8.0 is installed",)


@pytest.mark.parametrize(
    ("installed", "problem"),
    [
        (("3.8.0",), None),
        ((), "triton==3.8.0: full installs what slim left out back, and it is not installed"),
        (
            ("3.7.0",),
            "triton==3.8.0: full installs what slim left out back, and triton 3.7.0 is installed",
        ),
    ],
)
def test_full_carries_what_slim_left_out_at_its_version(
    installed: tuple[str, ...], problem: str | None
) -> None:
    triton = [dist("Triton", v, entry(f"{SITE}/triton/__init__.py")) for v in installed]
    verdict = judge(facts(TORCH, *triton, left_out=("triton==3.8.0",), full=True), Flavour.FULL)
    assert verdict.failures == ((problem,) if problem else ())
    assert verdict.left_out == ()  # in full nothing is left out


def test_a_venv_with_no_record_fails() -> None:
    check = wheel_files_check(facts(), Flavour.SLIM)
    assert not check.ok and check.detail == "no RECORD under /opt/venv"


def test_full_weighs_slim_s_report_and_its_own() -> None:
    """Full carries slim's venv (its static archives still gone) and its own overlay."""
    overlay = PruneReport(
        stripped={f"{SITE}/zmq/libzmq.so": 10},
        stripped_sha256={f"{SITE}/zmq/libzmq.so": Digests(before=A, after=C)},
    )
    pruned = Pruned.of([REPORT, overlay])
    assert judge_entry(entry(STATIC, kind="missing"), pruned).holds == "static archive removed"
    assert judge_entry(entry(f"{SITE}/zmq/libzmq.so", seen=C), pruned).holds == "stripped"


def test_many_failures_are_named_up_to_ten_and_counted() -> None:
    gone = [entry(f"{SITE}/pkg/m{i}.py", kind="missing") for i in range(13)]
    check = wheel_files_check(facts(dist("pkg", "1", *gone)), Flavour.SLIM)
    assert (
        check.detail.count(" is missing") == 10
        and "m9.py is missing; and 3 more; 2,500 MB" in check.detail
    )


def test_the_script_s_output_parses_and_anything_else_is_refused() -> None:
    text = json.dumps(facts(TORCH).model_dump(by_alias=True))
    assert parse_facts(text) == facts(TORCH)
    with pytest.raises(ValueError):
        parse_facts('{"schema": 2}')


SCRIPT = Path(__file__).resolve().parents[3] / "templates" / "wheel_files.py"


def spelled(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_the_script_reports_what_lies_at_each_record_path(tmp_path: Path) -> None:
    """templates/wheel_files.py on a venv: a file, a link, a script under ../../../bin, a file
    gone, a header (and a link to it) only in the headers archive, a folder, an unhashed RECORD."""
    venv = tmp_path / "venv"
    site = venv / SITE
    (site / "pkg").mkdir(parents=True)
    (venv / "bin").mkdir()
    (site / "pkg" / "mod.py").write_bytes(b"x = 1\n")
    (site / "pkg" / "lib.so.1").write_bytes(b"\x7fELF lib")
    (site / "pkg" / "lib.so").symlink_to("lib.so.1")
    (site / "pkg" / "data").mkdir()
    (venv / "bin" / "tool").write_bytes(b"#!python\n")
    header = b"int h;\n"
    with tarfile.open(venv / "imagekit-headers.tar.gz", "w:gz") as archive:
        item = tarfile.TarInfo(f"{SITE}/pkg/include/h.h")
        item.size = len(header)
        archive.addfile(item, io.BytesIO(header))
        link = tarfile.TarInfo(f"{SITE}/pkg/include/alias.h")
        link.type, link.linkname = tarfile.SYMTYPE, "h.h"
        archive.addfile(link)
    (venv / "imagekit-left-out.txt").write_text("triton==3.8.0\n")
    (venv / "imagekit-pruned.json").write_text('{"stripped": {}, "linked": {}}')
    info = site / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: Pkg\nVersion: 1.0\n")
    rows = [
        ("pkg/mod.py", spelled(b"x = 1\n")),
        ("pkg/lib.so", spelled(b"\x7fELF lib")),
        ("../../../bin/tool", spelled(b"#!python\n")),
        ("pkg/gone.py", A),
        ("pkg/include/h.h", spelled(header)),
        ("pkg/include/alias.h", spelled(header)),
        ("pkg/data", A),
        ("pkg-1.0.dist-info/RECORD", ""),
    ]
    (info / "RECORD").write_text("".join(f"{p},{h},\n" for p, h in rows))
    out = subprocess.run(
        [sys.executable, "-I", "-S", str(SCRIPT), str(venv)], check=True, capture_output=True
    ).stdout
    found = parse_facts(out.decode())
    assert found.left_out == ("triton==3.8.0",) and found.reports["imagekit-pruned.json"]
    assert found.reports["imagekit-pruned-full.json"] is None
    (pkg,) = found.distributions
    assert (pkg.name, pkg.version, pkg.record) == ("Pkg", "1.0", f"{SITE}/pkg-1.0.dist-info/RECORD")
    seen = {e.path: (e.kind, e.seen == e.hash, e.target, e.packed) for e in pkg.entries}
    assert seen == {
        f"{SITE}/pkg/mod.py": ("file", True, "", ""),
        f"{SITE}/pkg/lib.so": ("link", True, "lib.so.1", ""),
        "bin/tool": ("file", True, "", ""),
        f"{SITE}/pkg/gone.py": ("missing", False, "", ""),
        f"{SITE}/pkg/include/h.h": ("missing", False, "", spelled(header)),
        f"{SITE}/pkg/include/alias.h": ("missing", False, "", spelled(header)),
        f"{SITE}/pkg/data": ("other", False, "", ""),
        f"{SITE}/pkg-1.0.dist-info/RECORD": ("file", True, "", ""),
    }
    assert found.bytes_hashed == len(b"x = 1\n") + len(b"\x7fELF lib") + len(b"#!python\n")


@dataclass
class Ran:
    rc: int
    stdout: str = ""
    stderr: str = ""


class Container:
    """A container stand-in that keeps what put_archive copied in."""

    def __init__(self) -> None:
        self.copied: dict[str, bytes] = {}

    def put_archive(self, path: str, data: bytes) -> bool:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            for member in archive.getmembers():
                handle = archive.extractfile(member)
                assert handle is not None
                self.copied[f"{path}/{member.name}"] = handle.read()
        return True


class Root:
    """A testinfra host stand-in that runs the copied script on `venv` in place of /opt/venv."""

    def __init__(self, container: Container, venv: Path, ran: Ran | None = None) -> None:
        self.container, self.venv, self.ran, self.commands = container, venv, ran, []

    def run(self, command: str) -> Ran:
        self.commands.append(command)
        if self.ran is not None:
            return self.ran
        *_, at, venv = command.split()
        script = self.venv.parent / "copied.py"
        script.write_bytes(self.container.copied[at])
        assert venv == "/opt/venv"
        out = subprocess.run(
            [sys.executable, "-I", "-S", str(script), str(self.venv)],
            capture_output=True,
            text=True,
        )
        return Ran(out.returncode, out.stdout, out.stderr)


def test_the_structure_checks_copy_the_script_in_and_judge_what_it_prints(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    info = venv / SITE / "pkg-1.0.dist-info"
    info.mkdir(parents=True)
    module = b"x = 1\n"
    (venv / SITE / "pkg.py").write_bytes(module)
    (info / "RECORD").write_text(f"pkg.py,{spelled(module)},6\npkg-1.0.dist-info/RECORD,,\n")
    container = Container()
    root = Root(container, venv)
    (check,) = _wheel_files_checks(container, ImageLabels(flavour=Flavour.SLIM), root)
    assert root.commands == ["/opt/venv/bin/python -I -S /tmp/imagekit-wheel-files.py /opt/venv"]
    assert container.copied["/tmp/imagekit-wheel-files.py"] == SCRIPT.read_bytes()
    assert check.ok and check.detail.startswith("2 files of 1 distributions as their wheels")
    (venv / SITE / "pkg.py").unlink()
    (check,) = _wheel_files_checks(container, ImageLabels(flavour=Flavour.SLIM), root)
    assert not check.ok and f"pkg 1.0: {SITE}/pkg.py is missing" in check.detail


@pytest.mark.parametrize(
    ("ran", "detail"),
    [
        (Ran(1, "", "Traceback ...\nPermissionError: RECORD\n"), "could not look (exit 1): Perm"),
        (Ran(0, "not json"), "unreadable facts: "),
    ],
)
def test_a_look_that_failed_fails_the_check_saying_why(
    tmp_path: Path, ran: Ran, detail: str
) -> None:
    container = Container()
    (check,) = _wheel_files_checks(container, ImageLabels(), Root(container, tmp_path, ran))
    assert check.name == CHECK_NAME and not check.ok and check.detail.startswith(detail)


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", SCRIPT.with_name(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_scripts_and_the_core_spell_the_file_names_alike() -> None:
    """The scripts run where imagekit is not installed, so each spells the names it shares."""
    facts_script, prune_script = _script("wheel_files.py"), _script("prune_venv.py")
    assert facts_script.REPORTS == (SLIM_REPORT, FULL_REPORT)
    assert facts_script.HEADERS_ARCHIVE == prune_script.HEADERS_ARCHIVE == HEADERS_ARCHIVE
    assert SCRIPT.name == WHEEL_FILES_SCRIPT
