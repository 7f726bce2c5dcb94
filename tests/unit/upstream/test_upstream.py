"""Following upstream: facts read from real torch wheels, the refresh against a package index
served here on 127.0.0.1, and compat verify against the wheels on hand.

The index is made by each test at run time from the real wheels of this machine's wheelhouse
(`make wheelhouse`): their real METADATA (PEP 658 files) or the wheels themselves (HTTP
ranges). Nothing in it is written by hand; the wrong facts the failing cases need are planted
into copies, and say so.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.errors import InputError
from imagekit.upstream.metadata import Machine, WheelFacts, wheel_facts
from imagekit.upstream.simple_index import parse_project_page

ROOT = Path(__file__).resolve().parents[3]
CACHE = Path.home() / ".cache" / "imagekit"
CPU_HOUSE = Path(os.environ.get("IMAGEKIT_WHEELHOUSE", CACHE / "wheelhouse-cpu"))
CPU_WHEEL = CPU_HOUSE / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
# Where `make wheelhouse-cuda` and `make wheelhouse-arm64` put theirs (checked when there).
CUDA_HOUSES = (CACHE / "wheelhouse-cu130", CACHE / "wheelhouse-cu130-arm64")

if not CPU_WHEEL.exists():  # pragma: no cover - `make test` makes the wheelhouse first
    pytest.skip(f"{CPU_WHEEL} is not there: run `make wheelhouse`", allow_module_level=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


CPU_SHA = _sha256(CPU_WHEEL)
CPU_METADATA = zipfile.ZipFile(CPU_WHEEL).read("torch-2.13.0+cpu.dist-info/METADATA")


# Derivation from the real CPU wheel -----------------------------------------------------------


def test_the_cpu_wheel_states_its_release_python_platform_and_no_nvidia_wheels() -> None:
    facts = wheel_facts(CPU_WHEEL.name, CPU_SHA, CPU_METADATA.decode())
    assert facts == WheelFacts(
        filename=CPU_WHEEL.name,
        sha256=CPU_SHA,
        torch="2.13.0",
        label="cpu",
        cuda=None,
        cudnn=None,
        nccl=None,
        pins=(),
        python="3.11",
        machine=Machine.x86_64,
        platform="manylinux_2_28",
        glibc="2.28",
    )


def test_a_wheel_for_another_system_is_not_read_further() -> None:
    name = "torch-2.13.0-cp311-cp311-win_amd64.whl"
    assert wheel_facts(name, "", CPU_METADATA.decode()) is None


@pytest.mark.parametrize(
    "filename,planted,message",
    [
        (  # planted: the real CPU METADATA relabelled +cu130; it pins no CUDA toolkit
            "torch-2.13.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl",
            "Version: 2.13.0+cu130\n",
            "torch-2.13.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl: its label +cu130 says "
            "CUDA 13.0 but it pins no CUDA toolkit; the index mixes up its builds",
        ),
        (  # planted: a CUDA toolkit pin without cuDNN
            "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
            "Version: 2.13.0\nRequires-Dist: cuda-toolkit[cudart]==13.0.3\n",
            "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl: a CUDA 13.0 build that pins "
            "no cuDNN wheel; compat.yaml needs both pins of every CUDA variant",
        ),
        (
            "torch-2.13.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
            None,
            "torch-2.13.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl: its METADATA is of "
            "version 2.13.0+cpu, not 2.13.1+cpu; the index serves the wrong file",
        ),
        ("torch.whl", None, "torch.whl: not a wheel file name"),
    ],
)
def test_a_wheel_that_contradicts_itself_is_refused_in_one_line(
    filename: str, planted: str | None, message: str
) -> None:
    text = CPU_METADATA.decode().replace(
        "Version: 2.13.0+cpu\n", planted or "Version: 2.13.0+cpu\n"
    )
    with pytest.raises(InputError) as caught:
        wheel_facts(filename, "", text)
    assert caught.value.message.startswith(message)
    assert "\n" not in caught.value.format()


@pytest.mark.parametrize(
    "content_type,body,what",
    [
        ("application/vnd.pypi.simple.v1+json", b"{not json", "is not a PEP 691 page"),
        ("application/vnd.pypi.simple.v1+json", b'{"meta": {}}', "is not a PEP 691 page"),
        ("text/html", b"<html><body>no files here</body></html>", "lists no files"),
        ("image/png", b"\x89PNG", "answered image/png, not a simple page"),
    ],
)
def test_a_malformed_simple_page_is_one_line_naming_its_url(
    content_type: str, body: bytes, what: str
) -> None:
    url = "http://127.0.0.1:9/simple/torch/"
    with pytest.raises(InputError) as caught:
        parse_project_page(url, content_type, body)
    assert caught.value.message.startswith(f"{url}: {what}")
    assert "check that --index names a simple index" in caught.value.message


def test_both_page_formats_give_the_same_files_and_metadata_links() -> None:
    url = "http://127.0.0.1:9/simple/torch/"
    name = CPU_WHEEL.name
    page = {
        "files": [
            {
                "filename": name,
                "url": f"../../files/{name}",
                "hashes": {"sha256": CPU_SHA},
                "core-metadata": {"sha256": "abc"},
            }
        ]
    }
    html = (
        f'<a href="../../files/{name}#sha256={CPU_SHA}" data-core-metadata="sha256=abc">{name}</a>'
    )
    from_json = parse_project_page(
        url, "application/vnd.pypi.simple.v1+json", json.dumps(page).encode()
    )
    from_html = parse_project_page(url, "text/html", html.encode())
    assert from_json == from_html
    assert from_json[0].metadata_url == f"http://127.0.0.1:9/files/{name}.metadata"


# A package index on 127.0.0.1 -----------------------------------------------------------------


class Index:
    """A simple index served from this machine's real wheels: `pages` by path, and each
    wheel's bytes read from disk (with HTTP ranges, as PyPI's file host does)."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[str, bytes]] = {}
        self.wheels: dict[str, Path] = {}
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path in index.wheels:
                    return self.wheel(index.wheels[self.path])
                if self.path not in index.pages:
                    self.send_error(404)
                    return
                kind, body = index.pages[self.path]
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def wheel(self, path: Path) -> None:
                size = path.stat().st_size
                first, _, last = self.headers["Range"].removeprefix("bytes=").partition("-")
                start, end = (
                    (max(0, size - int(last)), size - 1) if not first else (int(first), int(last))
                )
                with path.open("rb") as stream:
                    stream.seek(start)
                    body = stream.read(end - start + 1)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/simple"

    def serve_json(self, wheels: list[Path]) -> None:
        """A PEP 691 page with a PEP 658 METADATA file beside each wheel."""
        files = []
        for wheel in wheels:
            metadata = _metadata_of(wheel)
            self.pages[f"/files/{wheel.name}.metadata"] = ("text/plain", metadata)
            files.append({
                "filename": wheel.name,
                "url": f"../../files/{wheel.name}",
                "hashes": {"sha256": _sha256(wheel)},
                "core-metadata": {"sha256": hashlib.sha256(metadata).hexdigest()},
            })  # fmt: skip
        body = json.dumps({"meta": {"api-version": "1.1"}, "name": "torch", "files": files})
        self.pages["/simple/torch/"] = ("application/vnd.pypi.simple.v1+json", body.encode())

    def serve_html(self, wheels: list[Path]) -> None:
        """A PEP 503 page without METADATA files: the wheels are read through ranges."""
        anchors = "".join(
            f'<a href="/files/{w.name}#sha256={_sha256(w)}">{w.name}</a>\n' for w in wheels
        )
        self.wheels |= {f"/files/{w.name}": w for w in wheels}
        self.pages["/simple/torch/"] = (
            "text/html",
            f"<html><body>{anchors}</body></html>".encode(),
        )


def _metadata_of(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        [name] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        return archive.read(name)


@pytest.fixture
def index() -> Iterator[Index]:
    served = Index()
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()


def imagekit(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IMAGEKIT_INDEX": ""}
    return subprocess.run(
        [sys.executable, "-m", "imagekit", *args], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip


def copies(tmp_path: Path) -> tuple[Path, Path]:
    """matrix.yaml (which lacks torch 2.13.0) and compat.yaml, copied."""
    matrix, compat = tmp_path / "matrix.yaml", tmp_path / "compat.yaml"
    matrix.write_text((ROOT / "matrix.yaml").read_text())
    compat.write_text((ROOT / "imagekit" / "data" / "compat.yaml").read_text())
    return matrix, compat


EXPECTED_FINDING = [
    "torch 2.13.0 cpu: add to {matrix}",
    "  pins: no NVIDIA wheels",
    "  Python 3.11 on x86_64, manylinux_2_28 (glibc >= 2.28)",
    f"  from {CPU_WHEEL.name} sha256:{CPU_SHA}",
]
# Inserted after the last release entry (the 2.15.0-jammy one ends with `flavours: [slim]`).
NEW_ENTRY = '  - torch: "2.13.0"\n    cuda: ["cpu"]\n'


@pytest.mark.parametrize("page", ["json", "html"])
def test_refresh_proposes_exactly_the_release_the_index_holds_and_writes_it_keeping_the_rest(
    index: Index, tmp_path: Path, page: str
) -> None:
    (index.serve_json if page == "json" else index.serve_html)([CPU_WHEEL])
    matrix, compat = copies(tmp_path)
    before, compat_before = matrix.read_text(), compat.read_text()
    args = ("matrix", "refresh", "-m", str(matrix), "--compat", str(compat), "--index", index.url)
    done = imagekit(*args)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:4] == [line.format(matrix=matrix) for line in EXPECTED_FINDING]
    assert [line for line in lines[4:] if line.startswith("+ ")] == [
        '+  - torch: "2.13.0"',
        '+    cuda: ["cpu"]',
    ]
    assert matrix.read_text() == before  # a proposal only

    written = imagekit(*args, "--write")
    assert written.returncode == 0, written.stderr
    marker = "    flavours: [slim]\n"
    assert matrix.read_text() == before.replace(marker, marker + NEW_ENTRY, 1)
    assert "# The images this team publishes" in matrix.read_text()  # comments kept
    assert compat.read_text() == compat_before  # compat knew 2.13.0: nothing to add
    again = imagekit(*args)
    assert again.stdout.startswith("nothing to propose"), again.stdout


def test_refresh_adds_a_missing_variant_to_the_entry_of_its_release(
    index: Index, tmp_path: Path
) -> None:
    index.serve_json([CPU_WHEEL])
    matrix, compat = copies(tmp_path)
    entry = '  - torch: "2.14.1"\n    cuda: ["12.6", "13.0", "13.2"]\n'
    planted = '  - torch: "2.13.0"\n    cuda: ["12.6", "13.0"]\n'  # 2.13.0 without cpu
    matrix.write_text(matrix.read_text().replace(entry, entry + planted, 1))
    before = matrix.read_text()
    done = imagekit("matrix", "refresh", "-m", str(matrix), "--compat", str(compat),
                    "--index", index.url, "--write")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert matrix.read_text() == before.replace(
        planted, planted.replace('"13.0"]', '"13.0", "cpu"]')
    )


def _refused(done: subprocess.CompletedProcess[str], *starts: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == len(starts), errors
    for line, start in zip(errors, starts, strict=True):
        assert line.startswith(start), (line, start)


def test_an_unreachable_index_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    matrix, compat = copies(tmp_path)
    before = matrix.read_text()
    done = imagekit("matrix", "refresh", "-m", str(matrix), "--compat", str(compat),
                    "--index", "http://127.0.0.1:9/simple", "--write")  # fmt: skip
    _refused(done, "error: http://127.0.0.1:9/simple/torch/: cannot reach the index")
    assert matrix.read_text() == before


def test_a_malformed_page_and_a_wheel_without_metadata_are_refused(
    index: Index, tmp_path: Path
) -> None:
    matrix, compat = copies(tmp_path)
    before = matrix.read_text()
    index.pages["/simple/torch/"] = ("application/vnd.pypi.simple.v1+json", b'{"files": 3}')
    args = ("matrix", "refresh", "-m", str(matrix), "--compat", str(compat), "--index", index.url)
    _refused(imagekit(*args, "--write"), f"error: {index.url}/torch/: is not a PEP 691 page")
    # A wheel without METADATA: a zip of the wheel's WHEEL file only, under the wheel's name.
    empty = tmp_path / "wheels" / CPU_WHEEL.name
    empty.parent.mkdir()
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("torch-2.13.0+cpu.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    index.serve_html([empty])
    _refused(
        imagekit(*args, "--write"),
        f"error: {index.url.removesuffix('/simple')}/files/{CPU_WHEEL.name}: holds no "
        "*.dist-info/METADATA",
    )
    assert matrix.read_text() == before


def test_a_release_compat_cannot_hold_is_refused_with_its_place(
    index: Index, tmp_path: Path
) -> None:
    """A copy of compat.yaml without torch 2.13.0: its CPU wheels alone make no row."""
    index.serve_json([CPU_WHEEL])
    matrix, compat = copies(tmp_path)
    text = compat.read_text()
    start = text.index('  "2.13.0":')
    compat.write_text(text[:start] + text[text.index('  "2.14.1":') :])
    before = compat.read_text(), matrix.read_text()
    done = imagekit("matrix", "refresh", "-m", str(matrix), "--compat", str(compat),
                    "--index", index.url, "--write")  # fmt: skip
    _refused(
        done,
        f"error: {compat}:",
        "1 problem found; nothing was written.",
    )
    assert "torch 2.13.0: the indexes hold only CPU wheels" in done.stderr
    assert (compat.read_text(), matrix.read_text()) == before


# compat verify --------------------------------------------------------------------------------


def test_compat_verify_confirms_the_wheels_on_hand_and_says_what_it_skipped(tmp_path: Path) -> None:
    absent = tmp_path / "not-there"
    houses = [CPU_HOUSE, *CUDA_HOUSES, absent]
    done = imagekit("compat", "verify", *(f"--wheelhouse={h}" for h in houses))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        f"{CPU_WHEEL.name}: agrees: torch 2.13.0 cpu, Python 3.11, x86_64 manylinux_2_28"
        in done.stdout
    )
    assert f"{absent}: skipped: no such folder" in done.stdout
    for house in CUDA_HOUSES:  # checked where `make wheelhouse-cuda/-arm64` ran, else skipped
        said = f"{house}: skipped: no such folder" in done.stdout
        assert said != house.is_dir()


def test_compat_verify_fails_on_a_planted_wrong_fact_with_its_line(tmp_path: Path) -> None:
    _, compat = copies(tmp_path)
    text = compat.read_text()
    at = text.index('  "2.13.0":\n    python: {min: "3.10"')
    compat.write_text(text[:at] + text[at:].replace('min: "3.10"', 'min: "3.12"', 1))
    line = text[:at].count("\n") + 2
    done = imagekit("compat", "verify", f"--wheelhouse={CPU_HOUSE}", "--compat", str(compat))
    _refused(
        done,
        f"error: {compat}:{line}:13: torch 2.13.0: Python 3.12-3.14, yet {CPU_WHEEL.name} "
        f"(sha256:{CPU_SHA}) is for 3.11; widen it",
        "1 problem found; the wheel's METADATA wins.",
    )
