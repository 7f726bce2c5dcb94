"""Pending OS security fixes: a dpkg status file against a security suite's Packages index,
in the formats Debian writes them (stanzas cut from bookworm's own files)."""

from __future__ import annotations

import pytest

from imagekit.audit.debian import (
    Installed,
    installed_packages,
    pending_fixes,
    security_index,
)
from imagekit.errors import InputError

STATUS = """\
Package: libssl3
Status: install ok installed
Priority: optional
Section: libs
Installed-Size: 6042
Maintainer: Debian OpenSSL Team <pkg-openssl-devel@alioth-lists.debian.net>
Architecture: amd64
Multi-Arch: same
Source: openssl
Version: 3.0.20-1~deb12u2
Depends: libc6 (>= 2.34)
Description: Secure Sockets Layer toolkit - shared libraries

Package: tzdata
Status: install ok installed
Architecture: all
Version: 2025b-0+deb12u1
Description: time zone and daylight-saving time data

Package: libbrotli1
Status: install ok installed
Architecture: amd64
Source: brotli (1.0.9-2)
Version: 1.0.9-2+b6
Description: library implementing brotli encoder and decoder (shared libraries)

Package: zlib1g
Status: install ok installed
Architecture: amd64
Source: zlib
Version: 1:1.2.13.dfsg-1
Description: compression library - runtime

Package: libgone1
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0-1
Description: removed, its configuration kept

Package: bash
Status: install ok installed
Architecture: amd64
Version: 5.2.15-2+b8
Description: GNU Bourne Again SHell
"""

INDEX = """\
Package: libssl3
Source: openssl
Version: 3.0.22-1~deb12u2
Architecture: amd64
Filename: pool/updates/main/o/openssl/libssl3_3.0.22-1~deb12u2_amd64.deb

Package: libssl3
Source: openssl
Version: 3.0.21-1~deb12u1
Architecture: amd64

Package: tzdata
Version: 2026f-0+deb12u1
Architecture: all

Package: libbrotli1
Source: brotli
Version: 1.0.9-2+deb12u1
Architecture: amd64

Package: zlib1g
Source: zlib
Version: 1:1.2.13.dfsg-1+deb12u1
Architecture: i386

Package: libgone1
Version: 1.0-2
Architecture: amd64
"""


def test_only_installed_packages_are_read_with_their_source_package() -> None:
    found = {p.name: p for p in installed_packages(STATUS)}
    assert "libgone1" not in found  # removed, only its configuration left
    assert found["libssl3"] == Installed("libssl3", "3.0.20-1~deb12u2", "amd64", "openssl")
    assert found["libbrotli1"].source == "brotli"  # "brotli (1.0.9-2)": a binNMU's source
    assert found["bash"].source == "bash"  # no Source field: the package is its own source


def test_a_newer_version_in_the_security_index_is_a_pending_fix() -> None:
    pending = pending_fixes(installed_packages(STATUS), security_index(INDEX))
    assert [p.line() for p in pending] == [
        "brotli: libbrotli1 1.0.9-2+b6 -> 1.0.9-2+deb12u1",
        "openssl: libssl3 3.0.20-1~deb12u2 -> 3.0.22-1~deb12u2",  # the newest of the two
        "tzdata: tzdata 2025b-0+deb12u1 -> 2026f-0+deb12u1",  # Architecture: all
    ]
    # zlib1g's fix is for another architecture; libgone1 is not installed.


def test_versions_compare_as_dpkg_compares_them() -> None:
    """Epochs and `~` decide, where text order would not."""
    cases = [
        ("1:1.0-1", "2.0-1", False),  # an epoch outranks any upstream version
        ("2.0~rc1-1", "2.0-1", True),  # ~ sorts before the release
        ("1.0-1+deb12u9", "1.0-1+deb12u10", True),  # numbers compare as numbers
        ("1.0-1+deb12u1", "1.0-1+deb12u1", False),
    ]
    for installed, offered, pending in cases:
        status = (
            f"Package: p\nStatus: install ok installed\nArchitecture: amd64\nVersion: {installed}\n"
        )
        index = f"Package: p\nVersion: {offered}\nArchitecture: amd64\n"
        found = pending_fixes(installed_packages(status), security_index(index))
        assert bool(found) is pending, (installed, offered)


def test_a_stanza_without_a_version_is_bad_input_with_its_place() -> None:
    with pytest.raises(InputError) as caught:
        security_index("Package: a\nVersion: 1\n\nPackage: b\n", "bookworm-security Packages")
    assert "bookworm-security Packages: stanza 2" in caught.value.message


def test_a_version_dpkg_would_refuse_is_bad_input() -> None:
    with pytest.raises(InputError) as caught:
        security_index("Package: a\nVersion: 1.0 beta\nArchitecture: all\n")
    assert "stanza 1 (a)" in caught.value.message
