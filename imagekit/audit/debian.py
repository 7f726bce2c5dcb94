"""Pending OS security fixes of an image, read from the distribution's own security index. Pure.

What is installed comes from the image's dpkg database (`/var/lib/dpkg/status`, read from the
image's files: no shell or dpkg needed inside it). What is fixed comes from the security
suite's `Packages` index (`bookworm-security`; an Ubuntu release's `-security` pocket): a
binary package whose version there is newer than the installed one has a fix the image does
not carry. Versions are compared as dpkg compares them (python-debian's `Version`: epochs,
`~` before anything, Debian revisions), which a string or PEP 440 comparison gets wrong for
`3.0.20-1~deb12u2` against `3.0.22-1~deb12u2` or `1:2.0` against `3.0`.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from debian.deb822 import Deb822, Packages
from debian.debian_support import Version

from imagekit.errors import InputError


@dataclass(frozen=True)
class Installed:
    """One binary package installed in an image."""

    name: str
    version: str
    arch: str
    source: str  # the source package (dpkg's `Source:`, else the package's own name)


@dataclass(frozen=True)
class Offered:
    """A binary package's version in a security index."""

    name: str
    version: str
    arch: str
    source: str


@dataclass(frozen=True)
class PendingFix:
    """An installed package with a newer version in the security suite."""

    package: str
    installed: str
    fixed: str
    source: str
    arch: str

    def line(self) -> str:
        """`openssl: libssl3 3.0.20-1~deb12u2 -> 3.0.22-1~deb12u2`."""
        return f"{self.source}: {self.package} {self.installed} -> {self.fixed}"


def _source_name(field: str, package: str) -> str:
    # `Source: openssl` or `Source: openssl (3.0.20-1~deb12u2)` (a binNMU's source version).
    return field.split(" ", 1)[0].strip() or package


def installed_packages(status: str) -> tuple[Installed, ...]:
    """The packages a dpkg status file holds as installed (`Status: install ok installed`),
    sorted by name and architecture; half-installed and removed-but-configured ones are not."""
    found = []
    for stanza in Deb822.iter_paragraphs(io.StringIO(status), use_apt_pkg=False):
        if stanza.get("Status", "").split()[-1:] != ["installed"]:
            continue
        name, version = stanza.get("Package", ""), stanza.get("Version", "")
        if not name or not version:
            continue
        source = _source_name(stanza.get("Source", ""), name)
        found.append(Installed(name, version, stanza.get("Architecture", ""), source))
    return tuple(sorted(found, key=lambda p: (p.name, p.arch)))


def security_index(packages: str, where: str = "Packages") -> dict[str, Offered]:
    """A security suite's `Packages` index: the newest version of each binary package it
    offers, by `name:arch` (`libssl3:amd64`, `tzdata:all`). A stanza without a package name
    or with a version dpkg would refuse is bad input, named by its place in `where`."""
    offered: dict[str, Offered] = {}
    for number, stanza in enumerate(
        Packages.iter_paragraphs(io.StringIO(packages), use_apt_pkg=False), start=1
    ):
        name, version = stanza.get("Package", ""), stanza.get("Version", "")
        if not name or not version:
            raise InputError(
                f"{where}: stanza {number} has no Package or no Version",
                "is this a Debian Packages index (dists/SUITE/main/binary-ARCH/Packages)?",
            )
        try:
            parsed = Version(version)
        except ValueError as exc:
            raise InputError(f"{where}: stanza {number} ({name}): {exc}") from None
        arch = stanza.get("Architecture", "")
        key = f"{name}:{arch}"
        if key not in offered or Version(offered[key].version) < parsed:
            offered[key] = Offered(
                name, version, arch, _source_name(stanza.get("Source", ""), name)
            )
    return offered


def pending_fixes(
    installed: Iterable[Installed], offered: Mapping[str, Offered]
) -> tuple[PendingFix, ...]:
    """Each installed package whose version in the security index is newer, by source package
    then name (the order an advisory lists them in)."""
    pending = []
    for package in installed:
        fix = offered.get(f"{package.name}:{package.arch}")
        if fix is not None and Version(fix.version) > Version(package.version):
            pending.append(
                PendingFix(package.name, package.version, fix.version, package.source, package.arch)
            )
    return tuple(sorted(pending, key=lambda p: (p.source, p.package, p.arch)))
