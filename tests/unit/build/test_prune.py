"""prune_venv.py, the builder-stage script that slims a virtualenv, on real ELF files; and its
report as the evidence verify's wheel-files check weighs (templates/wheel_files.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.kernel.records import Check
from imagekit.kernel.vocabulary import Flavour
from imagekit.verify.wheel_files import parse_facts, wheel_files_check

SCRIPT = Path(__file__).resolve().parents[3] / "templates" / "prune_venv.py"
WHEEL_FILES = SCRIPT.with_name("wheel_files.py")
pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("gcc", "strip", "readelf")),
    reason="needs gcc and binutils (Debian: build-essential)",
)


def shared_object(path: Path, *, debug: bool) -> Path:
    source = path.with_suffix(".c")
    source.write_text("int imagekit_answer(void) { return 42; }\n" + "static int pad[20000];\n")
    flags = ["-g3"] if debug else []
    subprocess.run(["gcc", "-shared", "-fPIC", *flags, "-o", str(path), str(source)], check=True)
    source.unlink()
    return path


def debug_sections(path: Path) -> bool:
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True).stdout
    return " .debug_" in out


def prune(root: Path, *args: str, path: str | None = None) -> dict:
    env = {**os.environ, "PATH": path} if path is not None else None
    subprocess.run([sys.executable, str(SCRIPT), str(root), *args], check=True, env=env)
    return json.loads((root / "imagekit-pruned.json").read_text())


def readelf_debug_bytes(path: Path) -> int:
    """The `.debug_*` section sizes as binutils' readelf lists them."""
    out = subprocess.run(["readelf", "-S", "-W", str(path)], capture_output=True, text=True).stdout
    total = 0
    for line in out.splitlines():
        fields = line.replace("[ ", "[").split()
        if len(fields) > 5 and fields[1].startswith(".debug_"):
            total += int(fields[5], 16)
    return total


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    lib = tmp_path / "venv" / "lib" / "pkg"
    lib.mkdir(parents=True)
    shared_object(lib / "libdebug.so.1", debug=True)
    shared_object(lib / "libplain.so", debug=False)
    (lib / "libplain_static.a").write_bytes(b"!<arch>\n" + b"x" * 1000)
    (lib / "libalone.a").write_bytes(b"!<arch>\n" + b"y" * 1000)  # no shared twin: kept
    blob = bytes(range(256)) * 512
    for name in ("libdup.so", "libdup.so.12", "libdup.so.12.4.1"):
        (lib / name).write_bytes(blob)
    (lib / "libother.so.12").write_bytes(blob[::-1])  # same size, other bytes: kept
    return tmp_path / "venv"


def test_debug_sections_go_and_the_library_still_links(venv: Path) -> None:
    lib = venv / "lib" / "pkg"
    before = (lib / "libdebug.so.1").stat().st_size
    assert debug_sections(lib / "libdebug.so.1")
    report = prune(venv)
    assert not debug_sections(lib / "libdebug.so.1")
    assert report["stripped"] == {
        "lib/pkg/libdebug.so.1": before - (lib / "libdebug.so.1").stat().st_size
    }
    symbols = subprocess.run(
        ["readelf", "--dyn-syms", str(lib / "libdebug.so.1")], capture_output=True, text=True
    )
    assert "imagekit_answer" in symbols.stdout  # the exported symbol is untouched
    assert "lib/pkg/libplain.so" not in report["stripped"]


def test_static_archives_with_a_shared_twin_go_others_stay(venv: Path) -> None:
    report = prune(venv)
    lib = venv / "lib" / "pkg"
    assert not (lib / "libplain_static.a").exists() and (lib / "libalone.a").exists()
    assert list(report["static_removed"]) == ["lib/pkg/libplain_static.a"]


def test_static_archives_stay_when_asked(venv: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            str(venv),
            "--keep-static-archives",
            "--report",
            "other.json",
        ],
        check=True,
    )
    assert (venv / "lib" / "pkg" / "libplain_static.a").exists()
    assert not (venv / "imagekit-pruned.json").exists()
    assert json.loads((venv / "other.json").read_text())["static_removed"] == {}


def test_identical_copies_become_symlinks_to_the_most_specific_name(venv: Path) -> None:
    report = prune(venv)
    lib = venv / "lib" / "pkg"
    assert not (lib / "libdup.so.12.4.1").is_symlink()
    for name in ("libdup.so", "libdup.so.12"):
        assert (lib / name).is_symlink() and (lib / name).readlink() == Path("libdup.so.12.4.1")
        assert (lib / name).read_bytes() == (lib / "libdup.so.12.4.1").read_bytes()
    assert not (lib / "libother.so.12").is_symlink()
    assert set(report["linked"]) == {"lib/pkg/libdup.so", "lib/pkg/libdup.so.12"}
    assert report["saved_bytes"] >= 2 * 256 * 512


def test_headers_are_packed_and_unpack_to_the_same_files(venv: Path, tmp_path: Path) -> None:
    include = venv / "lib" / "python3.11" / "site-packages" / "torch" / "include" / "c10"
    include.mkdir(parents=True)
    (include / "macros.h").write_text("#define C10_X 1\n" * 2000)
    nested = venv / "lib" / "python3.11" / "site-packages" / "nvidia" / "cu13" / "include"
    nested.mkdir(parents=True)
    (nested / "cuda_runtime.h").write_text("/* cuda */\n" * 2000)
    report = prune(venv, "--pack-headers")
    assert set(report["headers_packed"]) == {
        "lib/python3.11/site-packages/torch/include",
        "lib/python3.11/site-packages/nvidia/cu13/include",
    }
    assert not include.exists() and not nested.exists()
    archive = venv / "imagekit-headers.tar.gz"
    assert 0 < report["headers_archive_bytes"] == archive.stat().st_size < 2000
    # What full does: unpack into its overlay, which lands over the venv.
    overlay = tmp_path / "overlay"
    subprocess.run([sys.executable, "-m", "tarfile", "-e", str(archive), str(overlay)], check=True)
    restored = overlay / "lib" / "python3.11" / "site-packages" / "torch" / "include" / "c10"
    assert (restored / "macros.h").read_text() == "#define C10_X 1\n" * 2000


def test_without_pack_headers_headers_stay(venv: Path) -> None:
    include = venv / "lib" / "python3.11" / "site-packages" / "torch" / "include"
    include.mkdir(parents=True)
    (include / "x.h").write_text("int x;\n")
    report = prune(venv)
    assert (include / "x.h").exists() and report["headers_packed"] == {}


def test_without_strip_on_path_debug_sections_are_found_and_left(
    venv: Path, tmp_path: Path
) -> None:
    """A base without binutils: nothing is installed for pruning, the bytes are reported."""
    lib = venv / "lib" / "pkg"
    before = (lib / "libdebug.so.1").read_bytes()
    no_tools = tmp_path / "bin"
    no_tools.mkdir()
    report = prune(venv, path=str(no_tools))
    assert (lib / "libdebug.so.1").read_bytes() == before
    assert report["stripped"] == {}
    assert report["debug_left"] == {
        "lib/pkg/libdebug.so.1": readelf_debug_bytes(lib / "libdebug.so.1")
    }
    assert report["debug_left"]["lib/pkg/libdebug.so.1"] > 0
    assert report["steps"]["debug_sections"]["bytes"] == 0


def test_each_step_reports_its_bytes_in_the_image_and_its_seconds_in_the_log(
    venv: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(venv), "--pack-headers"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    report = json.loads((venv / "imagekit-pruned.json").read_text())
    assert set(report["steps"]) == {"debug_sections", "static_archives", "duplicates", "headers"}
    # The image keeps no time: a rebuild of the same inputs writes the same report.
    assert all(set(figures) == {"bytes"} for figures in report["steps"].values())
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("prune_venv steps: ")]
    logged = json.loads(line.removeprefix("prune_venv steps: "))
    assert set(logged) == set(report["steps"])
    for name, figures in logged.items():
        assert figures["seconds"] >= 0 and figures["bytes"] == report["steps"][name]["bytes"]
    assert report["steps"]["static_archives"]["bytes"] == 1008
    assert report["steps"]["duplicates"]["bytes"] == 2 * 256 * 512
    assert report["saved_bytes"] == sum(s["bytes"] for s in report["steps"].values())


def record_hash(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def test_a_stripped_file_s_digests_before_and_after_are_reported(venv: Path) -> None:
    lib = venv / "lib" / "pkg"
    installed = record_hash(lib / "libdebug.so.1")
    report = prune(venv)
    assert report["stripped_sha256"] == {
        "lib/pkg/libdebug.so.1": {"before": installed, "after": record_hash(lib / "libdebug.so.1")}
    }
    assert installed != report["stripped_sha256"]["lib/pkg/libdebug.so.1"]["after"]
    # The byte counts keep their meaning: what `make bench` and the steps add up.
    assert report["stripped"]["lib/pkg/libdebug.so.1"] == report["steps"]["debug_sections"]["bytes"]


def test_the_private_keys_the_build_deleted_are_named_relative_to_the_venv(
    venv: Path, tmp_path: Path
) -> None:
    listing = tmp_path / "keys-removed"  # as drop_private_keys' `tee` writes it: NUL-separated
    listing.write_bytes(f"{venv}/lib/pkg/tests/test.key\0{venv}/lib/pkg/other.pem\0".encode())
    report = prune(venv, "--keys-removed", str(listing))
    assert report["keys_removed"] == ["lib/pkg/other.pem", "lib/pkg/tests/test.key"]
    listing.write_bytes(b"")
    assert prune(venv, "--keys-removed", str(listing))["keys_removed"] == []
    assert prune(venv)["keys_removed"] == []


def test_a_pruned_venv_still_holds_what_its_wheel_installed(venv: Path) -> None:
    """prune_venv.py's report, templates/wheel_files.py's facts and the core's judgement
    together: every step's change is accounted for, and a change no step made is caught."""
    site = venv / "lib" / "python3.11" / "site-packages"
    include = site / "pkg" / "include"
    include.mkdir(parents=True)
    (include / "pkg.h").write_text("int pkg;\n" * 100)
    (site / "pkg" / "test.key").write_text("-----BEGIN PRIVATE KEY-----\n")
    (venv / "bin").mkdir()
    (venv / "bin" / "pkg-tool").write_text("#!/opt/venv/bin/python\n")
    files = [p for p in venv.rglob("*") if p.is_file()]
    rows = [f"{os.path.relpath(p, site)},{record_hash(p)},{p.stat().st_size}" for p in files]
    dist_info = site / "pkg-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    (dist_info / "RECORD").write_text("\n".join([*rows, "pkg-1.0.dist-info/RECORD,,"]) + "\n")
    (site / "pkg" / "test.key").unlink()  # what the Dockerfile's drop_private_keys does
    listing = venv.parent / "keys-removed"
    listing.write_bytes(f"{site}/pkg/test.key\0".encode())
    prune(venv, "--pack-headers", "--keys-removed", str(listing))

    def check() -> Check:
        out = subprocess.run(
            [sys.executable, "-I", "-S", str(WHEEL_FILES), str(venv)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        return wheel_files_check(parse_facts(out), Flavour.SLIM)

    held = check()
    assert held.ok, held.detail
    for said in (
        f"{len(files) + 1} files of 1 distributions as their wheels installed them",
        "1 stripped of debug sections",
        "2 linked to an identical copy",
        "1 packed in imagekit-headers.tar.gz",
        "1 present, RECORD giving no hash",
        "1 removed as static archives with a shared twin: lib/pkg/libplain_static.a",
        "1 removed as private keys: lib/python3.11/site-packages/pkg/test.key",
    ):
        assert said in held.detail
    (venv / "lib" / "pkg" / "libother.so.12").write_bytes(b"changed")
    (venv / "bin" / "pkg-tool").unlink()
    lost = check()
    assert not lost.ok
    assert "pkg 1.0: lib/pkg/libother.so.12 has sha256=" in lost.detail
    assert "pkg 1.0: bin/pkg-tool is missing" in lost.detail


def test_uvs_cache_time_leaves_each_dist_info_and_its_record(venv: Path) -> None:
    """uv_cache.json holds when uv unpacked the wheel: the one file that differs between two
    builds of the same inputs. It goes, with its RECORD line; the rest of RECORD stays."""
    dist_info = venv / "lib" / "python3.11" / "site-packages" / "pkg-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "uv_cache.json").write_text('{"timestamp":{"secs_since_epoch":1796247744}}')
    rows = [
        "pkg/__init__.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,0",
        "pkg-1.0.dist-info/uv_cache.json,sha256=AAAA,46",
        "pkg-1.0.dist-info/RECORD,,",
    ]
    (dist_info / "RECORD").write_text("\n".join(rows) + "\n")
    report = prune(venv)
    assert not (dist_info / "uv_cache.json").exists()
    assert (dist_info / "RECORD").read_text() == f"{rows[0]}\n{rows[2]}\n"
    assert report["uv_cache_info_removed"] == 1


def test_the_headers_archive_is_the_same_bytes_for_the_same_headers(tmp_path: Path) -> None:
    """Two builds unpack the same headers at different times: with SOURCE_DATE_EPOCH set, the
    archive (tar and gzip headers included) is the same bytes."""
    made = []
    for n, when in enumerate((1_000_000_000, 1_500_000_000)):
        include = tmp_path / str(n) / "lib" / "python3.11" / "site-packages" / "pkg" / "include"
        include.mkdir(parents=True)
        for name in ("b.h", "a.h"):
            (include / name).write_text(f"int {name[0]};\n")
            os.utime(include / name, (when, when))
        env = {**os.environ, "SOURCE_DATE_EPOCH": "1700000000"}
        root = tmp_path / str(n)
        subprocess.run(
            [sys.executable, str(SCRIPT), str(root), "--pack-headers"], check=True, env=env
        )
        made.append((root / "imagekit-headers.tar.gz").read_bytes())
        (root / "imagekit-headers.tar.gz").unlink()
    assert made[0] == made[1]
