"""Step 3 of loading a matrix: each release entry against the compatibility data.

`EntryCheck.approve` reports every problem of an entry and returns the combinations
(`Combo`) that have none; `imagekit.matrix.expand` makes them cells.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.kernel.vocabulary import Platform
from imagekit.matrix.checks import Findings, bases_hint, unknown_os
from imagekit.matrix.compat import CPU, CompatData, version_key
from imagekit.matrix.schema import Entry, MatrixFile
from imagekit.matrix.shape_problems import FIELD_HINTS
from imagekit.matrix.yamlsrc import Path

# What an entry's `name` may hold: it names the output folder of its images.
_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789._-")


@dataclass(frozen=True)
class Combo:
    """One torch/CUDA/Python/OS combination of an entry that passed every check.

    `path` is its `cuda` item in the document, where a duplicate of it is reported.
    """

    entry: Entry
    name: str
    os: str
    cuda: str | None
    python: str
    path: Path
    platform: str = Platform.AMD64


class EntryCheck:
    """Checks one release entry against the compatibility data.

    `approve` reports every problem of the entry and returns the combinations that
    have none, in document order (cuda items, then Pythons). It builds no cells.
    """

    def __init__(self, spec: MatrixFile, compat: CompatData, report: Findings) -> None:
        self.spec = spec
        self.compat = compat
        self.report = report

    def approve(self, i: int, entry: Entry) -> list[Combo]:
        at: Path = ("releases", i)
        if (why := self.compat.check_pair(entry.torch, None)) is not None:
            self.report.fail((*at, "torch"), why)
            return []
        os_name = entry.os or self.spec.defaults.os
        os_path = (*at, "os") if entry.os else ("defaults", "os")
        if entry.os and entry.os not in self.spec.bases:
            self.report.fail(os_path, unknown_os(entry.os), bases_hint(self.spec))
            return []
        if os_name not in self.compat.os or os_name not in self.spec.bases:
            return []  # reported under `bases` or at `defaults.os`
        if entry.name is not None:
            self.check_name((*at, "name"), entry.name)
        name = entry.name or entry.torch
        pythons, py_path = self.pythons(entry, at, os_name)
        platforms = self.platforms(entry, at, os_name)
        out = []
        for j, cuda_text in enumerate(entry.cuda):
            c_path = (*at, "cuda", j)
            cuda = None if cuda_text == CPU else cuda_text
            if not self.cuda_ok(entry, cuda, c_path, at):
                continue
            usable = [p for p, p_at in platforms if self.platform_ok(entry, cuda, p, p_at)]
            for k, python in enumerate(pythons):
                p_path = (*py_path, k) if py_path else (*at, "torch")
                if self.python_ok(entry, python, os_name, os_path, p_path):
                    out += [
                        Combo(entry, name, os_name, cuda, python, c_path, platform)
                        for platform in usable
                    ]
        return out

    def platforms(self, entry: Entry, at: Path, os_name: str) -> list[tuple[str, Path]]:
        """The entry's platforms (its own, or the defaults'), each with where it is written;
        a platform named twice, or one its OS has no base image for, is reported and dropped."""
        if entry.platforms is not None:
            listed, where = entry.platforms, (*at, "platforms")
        else:
            listed, where = self.spec.defaults.platforms, ("defaults", "platforms")
        bases = self.spec.bases[os_name]
        out: list[tuple[str, Path]] = []
        for i, platform in enumerate(listed):
            p_at: Path = (*where, i)
            if platform in (p for p, _ in out):
                self.report.fail(p_at, f"platform {platform} is listed twice")
            elif isinstance(bases, dict) and platform not in bases:
                self.report.fail(
                    p_at,
                    f"bases.{os_name} names no image for {platform}",
                    f"add `{platform}: IMAGE` under bases.{os_name} "
                    "(`imagekit base bootstrap --arch ARCH` makes a Debian one), "
                    "or give one multi-platform image for every platform",
                )
            else:
                out.append((platform, p_at))
        return out

    def platform_ok(self, entry: Entry, cuda: str | None, platform: str, at: Path) -> bool:
        """Whether this torch/CUDA build has wheels for `platform` (reported where the
        platform is written when not); also checks `gpu_archs` against those wheels."""
        if (why := self.compat.check_platform(entry.torch, cuda, platform)) is not None:
            self.report.fail(
                at, why, "build this platform for a variant that has its wheels, or drop it"
            )
            return False
        return True

    def cuda_ok(self, entry: Entry, cuda: str | None, c_path: Path, at: Path) -> bool:
        """Whether torch ships `cuda` (not experimentally, unless allowed); also checks
        the entry's `gpu_archs` against that build."""
        if (why := self.compat.check_pair(entry.torch, cuda)) is not None:
            self.report.fail(c_path, why)
            return False
        variant = self.compat.torch[entry.torch].variants[cuda] if cuda else None
        if variant and variant.experimental and not entry.allow_experimental:
            self.report.fail(
                c_path,
                f"torch {entry.torch} with CUDA {cuda} is experimental in PyTorch's release matrix",
                "set `allow_experimental: true` on this entry to build it anyway",
            )
            return False
        if entry.gpu_archs is not None:
            self.check_archs((*at, "gpu_archs"), entry, cuda)
        return True

    def python_ok(
        self, entry: Entry, python: str, os_name: str, os_path: Path, p_path: Path
    ) -> bool:
        """Whether torch has wheels for `python` and the OS can run them."""
        if (why := self.compat.check_python(entry.torch, python)) is not None:
            self.report.fail(p_path, why)
            return False
        reasons = self.compat.check_os(entry.torch, os_name, python)
        for reason in reasons:
            self.report.fail(os_path if "glibc" in reason else p_path, reason)
        return not reasons

    def pythons(self, entry: Entry, at: Path, os_name: str) -> tuple[list[str], Path | None]:
        """The Pythons of an entry: its own, the defaults', or the OS's newest in range."""
        if entry.python is not None:
            return entry.python, (*at, "python")
        if self.spec.defaults.python is not None:
            return self.spec.defaults.python, ("defaults", "python")
        rng = self.compat.torch[entry.torch].python
        usable = [p for p in self.compat.os[os_name].python if rng.contains(p)]
        if usable:
            return [max(usable, key=version_key)], None
        self.report.fail(
            (*at, "torch"),
            f"{os_name} provides no Python that torch {entry.torch} supports ({rng})",
            "set `python:` on this entry and an `os:` that provides it",
        )
        return [], None

    def check_name(self, path: Path, name: str) -> None:
        if ".." in name or "/" in name or "\\" in name or name.startswith("."):
            self.report.fail(
                path,
                f"name {name!r} would write outside the output folder",
                "use a plain name such as `stable`",
            )
        elif not set(name) <= _NAME_CHARS:
            self.report.fail(path, f"name {name!r} may hold only {FIELD_HINTS['name']}")

    def check_archs(self, path: Path, entry: Entry, cuda: str | None) -> None:
        """`gpu_archs` against the wheels of every platform of the entry that has them."""
        archs = tuple(entry.gpu_archs or ())
        if cuda is None:
            return
        if (why := self.compat.check_archs(cuda, archs)) is not None:
            self.report.fail(path, why)
            return
        listed = entry.platforms or self.spec.defaults.platforms
        for platform in dict.fromkeys(listed):
            if self.compat.check_platform(entry.torch, cuda, platform) is not None:
                continue  # reported at the platform
            built = self.compat.archs_for(entry.torch, cuda, platform)
            missing = [a for a in archs if a not in built]
            if missing:
                on = f" ({platform})" if platform != Platform.AMD64 else ""
                self.report.fail(
                    path,
                    f"torch {entry.torch} with CUDA {cuda}{on} is not compiled for "
                    f"{', '.join(missing)}; it covers {', '.join(built)}",
                )
