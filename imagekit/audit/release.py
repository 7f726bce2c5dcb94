"""Which security suite an image takes fixes from, and what its signed `InRelease` says. Pure.

A Debian suite's `InRelease` is a clearsigned deb822 document: its `Date`, its `Valid-Until`,
and the SHA-256 of every index under it. The `Packages` index an audit reads is trusted through
that list (after the signature over the whole document is checked: adapters/security_index.py),
so one digest names the state of the security suite an image was built or audited against.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from debian.deb822 import Release

from imagekit.errors import InputError

# Where each distribution publishes its security suite, by the os-release ID of the image.
DEBIAN_SECURITY = "http://deb.debian.org/debian-security"
UBUNTU_SECURITY = "http://security.ubuntu.com/ubuntu"
UBUNTU_PORTS = "http://ports.ubuntu.com/ubuntu-ports"  # Ubuntu's security pocket off x86


@dataclass(frozen=True)
class SecuritySuite:
    """A distribution release's security suite: where it is, and which index to read."""

    mirror: str  # the archive root, without a trailing slash
    suite: str  # bookworm-security, noble-security
    component: str  # main (Debian, Ubuntu)
    arch: str  # dpkg's architecture name: amd64, arm64

    @property
    def in_release_url(self) -> str:
        return f"{self.mirror}/dists/{self.suite}/InRelease"

    @property
    def packages_path(self) -> str:
        """The index's path under dists/SUITE/, as InRelease lists it."""
        return f"{self.component}/binary-{self.arch}/Packages.xz"

    @property
    def packages_url(self) -> str:
        return f"{self.mirror}/dists/{self.suite}/{self.packages_path}"


def dpkg_arch(platform: str) -> str:
    """dpkg's architecture name of an engine's `linux/amd64`, `linux/arm64/v8`."""
    parts = platform.split("/")
    return parts[1] if len(parts) > 1 and parts[1] else "amd64"


def os_release_values(text: str) -> dict[str, str]:
    """The assignments of an `/etc/os-release` (quotes taken off)."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return values


def distro(text: str) -> str:
    """`debian-12` from an `/etc/os-release` (ID and VERSION_ID); its ID alone without one."""
    values = os_release_values(text)
    name, version = values.get("ID", ""), values.get("VERSION_ID", "")
    return f"{name}-{version}" if name and version else name


def security_suite(os_release: str, arch: str, mirror: str | None = None) -> SecuritySuite:
    """The security suite of the release `/etc/os-release` names (Debian or Ubuntu, by its
    VERSION_CODENAME), for dpkg architecture `arch`; `mirror` in place of the distribution's
    own. Any other distribution, or a release without a codename, is bad input."""
    values = os_release_values(os_release)
    name, codename = values.get("ID", ""), values.get("VERSION_CODENAME", "")
    if name not in ("debian", "ubuntu") or not codename:
        raise InputError(
            f"the image's /etc/os-release names {name or 'no distribution'}"
            f"{' ' + codename if codename else ''}: imagekit audits Debian and Ubuntu images",
            "an image of another distribution needs a scanner's report (--scanner-report)",
        )
    if name == "debian":
        default = DEBIAN_SECURITY
    else:
        default = UBUNTU_SECURITY if arch in ("amd64", "i386") else UBUNTU_PORTS
    return SecuritySuite((mirror or default).rstrip("/"), f"{codename}-security", "main", arch)


@dataclass(frozen=True)
class ReleaseFacts:
    """What a suite's InRelease says: when, until when, and its indexes' digests."""

    suite: str
    date: str  # RFC 2822, as written
    valid_until: str
    sha256: dict[str, tuple[str, int]]  # path under dists/SUITE/ -> (hex digest, size)

    def expired(self, now_epoch: int) -> bool:
        """Whether Valid-Until has passed (a replayed old InRelease hides newer fixes)."""
        if not self.valid_until:
            return False
        return parsedate_to_datetime(self.valid_until).timestamp() < now_epoch


def release_facts(payload: str, where: str) -> ReleaseFacts:
    """An InRelease's signed payload (the signature checked and taken off) as facts; bad
    input, named by `where`, when it lists no SHA256 section."""
    release = Release(payload)
    listed = {}
    for entry in release.get("SHA256", []):
        listed[entry["name"]] = (entry["sha256"], int(entry["size"]))
    if not listed:
        raise InputError(f"{where}: no SHA256 list of indexes", "is this a suite's InRelease?")
    suite = release.get("Codename", "") or release.get("Suite", "")
    return ReleaseFacts(suite, release.get("Date", ""), release.get("Valid-Until", ""), listed)
