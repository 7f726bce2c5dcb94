"""Adapter: package indexes over HTTP (the simple API), and the torch wheels of local folders.

A wheel's METADATA is read, in order of cost: PEP 658's file beside the wheel where the index
serves one; else from the wheel itself through HTTP ranges (a zip's directory is at its end,
so `zipfile` reading a file object that fetches what it is asked for reads a few hundred KB of
a wheel of half a gigabyte); else, from a server that ignores ranges, the whole wheel. Every
failure becomes one `InputError`: `URL: what is wrong; what to do`.
"""

from __future__ import annotations

import hashlib
import io
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from imagekit.errors import InputError
from imagekit.upstream.metadata import CompatSource, read_compat
from imagekit.upstream.ports import LocalWheel
from imagekit.upstream.simple_index import ACCEPT, IndexFile, parse_project_page, project_url

TAIL_BYTES = 1 << 16  # the first read of a wheel: its end, where the zip directory is
BLOCK_BYTES = 1 << 18  # each further ranged read


@dataclass(frozen=True)
class _Response:
    status: int
    content_type: str
    content_range: str
    body: bytes


class HttpPackageIndex:
    """`PackageIndex` over HTTP(S) with the standard library."""

    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s

    def get(self, url: str, headers: dict[str, str] | None = None) -> _Response:
        """One GET; what goes wrong is an `InputError` naming the URL."""
        request = urllib.request.Request(url, headers={"User-Agent": "imagekit", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                return _Response(
                    answer.status,
                    answer.headers.get("Content-Type", ""),
                    answer.headers.get("Content-Range", ""),
                    answer.read(),
                )
        except urllib.error.HTTPError as exc:
            raise InputError(
                f"{url}: the index answered HTTP {exc.code} {exc.reason}; "
                "check the URL (an index's simple API ends in /simple)"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise InputError(
                f"{url}: cannot reach the index ({reason}); check the URL and the network"
            ) from None

    def files(self, index: str, project: str) -> tuple[IndexFile, ...]:
        """Every file the index lists for `project`."""
        url = project_url(index, project)
        answer = self.get(url, {"Accept": ACCEPT})
        return parse_project_page(url, answer.content_type, answer.body)

    def metadata(self, file: IndexFile) -> str:
        """The METADATA of one wheel (PEP 658 file, else ranges, else the whole wheel)."""
        if file.metadata_url is not None:
            body = self.get(file.metadata_url).body
            if file.metadata_sha256 and hashlib.sha256(body).hexdigest() != file.metadata_sha256:
                raise InputError(
                    f"{file.metadata_url}: its sha256 is not the one the index lists; "
                    "the index serves a changed or broken file: refresh again later"
                )
            return _text(file.metadata_url, body)
        first = self.get(file.url, {"Range": f"bytes=-{TAIL_BYTES}"})
        if first.status == 206 and "/" in first.content_range:
            size = int(first.content_range.rsplit("/", 1)[1])
            raw = _RangedFile(self, file.url, size, first.body)
            return wheel_metadata(file.url, io.BufferedReader(raw, BLOCK_BYTES))
        return wheel_metadata(file.url, io.BytesIO(first.body))  # the server sent it all


class _RangedFile(io.RawIOBase):
    """A remote file read through HTTP ranges: what `zipfile` needs of a file object."""

    def __init__(self, index: HttpPackageIndex, url: str, size: int, tail: bytes) -> None:
        super().__init__()
        self.index, self.url, self.size, self.tail = index, url, size, tail
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        end = min(self.position + len(buffer), self.size)
        if self.position >= end:
            return 0
        tail_start = self.size - len(self.tail)
        if self.position >= tail_start:  # the end of the file was read first: no request
            data = self.tail[self.position - tail_start : end - tail_start]
        else:
            headers = {"Range": f"bytes={self.position}-{end - 1}"}
            data = self.index.get(self.url, headers).body[: end - self.position]
        buffer[: len(data)] = data
        self.position += len(data)
        return len(data)


def _text(where: str, body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{where}: METADATA that is not UTF-8 text; leave it out") from None


def wheel_metadata(where: str, wheel: IO[bytes]) -> str:
    """The `*.dist-info/METADATA` of a wheel (a zip archive); `InputError` where there is none."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [
                n
                for n in archive.namelist()
                if n.count("/") == 1 and n.endswith(".dist-info/METADATA")
            ]
            if not names:
                raise InputError(
                    f"{where}: holds no *.dist-info/METADATA, so it is no wheel pip would "
                    "install; leave it out of the index"
                )
            return _text(where, archive.read(names[0]))
    except (zipfile.BadZipFile, EOFError):
        raise InputError(f"{where}: not a zip archive, so not a wheel; leave it out") from None


def sha256_of(path: Path) -> str:
    """The sha256 of a file, read a MB at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class LocalWheelhouse:
    """`Wheelhouse` over this machine's folders."""

    def torch_wheels(self, folder: Path) -> tuple[LocalWheel, ...] | None:
        """The torch wheels in `folder`, by name; None when there is no such folder."""
        if not folder.is_dir():
            return None
        wheels = []
        for path in sorted(folder.glob("torch-*.whl")):
            with path.open("rb") as stream:
                metadata = wheel_metadata(str(path), stream)
            wheels.append(LocalWheel(path.name, sha256_of(path), metadata))
        return tuple(wheels)


def read_input(path: Path) -> str:
    """An input file's text; a missing or unreadable one is bad input, named."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})"
        ) from None


def compat_source(compat: Path | None) -> CompatSource:
    """The compatibility data of `--compat` (None: the one imagekit ships), read and checked."""
    from imagekit.matrix.compat import compat_path

    path = compat or compat_path()
    return read_compat(read_input(path), str(path))


def refresh_sources(matrix: Path, compat: Path | None) -> tuple[tuple[str, str], CompatSource]:
    """What `matrix refresh` reads: the matrix (file, text) and the compatibility data."""
    return (str(matrix), read_input(matrix)), compat_source(compat)


def write_files(files: tuple[tuple[str, str], ...]) -> None:
    """Each (path, text) written atomically (temp file + rename), only after all are known."""
    from imagekit.adapters.results import write_atomic

    for path, text in files:
        write_atomic(Path(path), text)
