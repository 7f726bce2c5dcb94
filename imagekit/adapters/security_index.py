"""Adapter: a security suite's index, fetched and checked the way apt checks it.

`InRelease` is fetched and its signature checked with gpgv against the distribution's archive
keyring (Debian's `debian-archive-keyring`, Ubuntu's `ubuntu-keyring`, or the one given); the
`Packages.xz` it lists is fetched and must have the size and SHA-256 the signed document gives.
Nothing unsigned, expired or damaged is read: a network failure is exit 3 with the URL, never
an empty index that would say "0 pending". Each suite is fetched once per process.
"""

from __future__ import annotations

import hashlib
import lzma
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from imagekit.audit.debian import security_index
from imagekit.audit.ports import IndexState
from imagekit.audit.release import SecuritySuite, release_facts
from imagekit.errors import EngineError, InputError

KEYRINGS = {
    "deb.debian.org": Path("/usr/share/keyrings/debian-archive-keyring.gpg"),
    "ubuntu.com": Path("/usr/share/keyrings/ubuntu-archive-keyring.gpg"),
}
TIMEOUT_S = 60


def _fetch(url: str, timeout_s: float) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bytes(response.read())
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EngineError(
            f"could not read the security index {url}: {reason}",
            "the audit needs the distribution's security suite (or --security-mirror)",
        ) from None


def default_keyring(mirror: str) -> Path | None:
    """The archive keyring that signs `mirror`'s suites, where this machine has one."""
    for host, keyring in KEYRINGS.items():
        if host in mirror:
            return keyring
    return None


def verified_payload(signed: bytes, keyring: Path, url: str) -> str:
    """The payload of a clearsigned InRelease whose signature gpgv accepts with `keyring`."""
    if shutil.which("gpgv") is None:
        raise InputError("gpgv is not installed", "apt-get install gpgv (make engine does)")
    if not keyring.is_file():
        raise InputError(
            f"no keyring at {keyring} to check {url} with",
            "apt-get install debian-archive-keyring (or ubuntu-keyring), or --security-keyring",
        )
    with tempfile.TemporaryDirectory(prefix="imagekit-gpgv-") as folder:
        signed_file, payload = Path(folder) / "InRelease", Path(folder) / "payload"
        signed_file.write_bytes(signed)
        done = subprocess.run(
            ["gpgv", "--keyring", str(keyring), "--output", str(payload), str(signed_file)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            said = done.stderr.strip().splitlines()[-1:] or ["no reason given"]
            raise InputError(
                f"{url}: the signature does not hold with {keyring}: {said[0]}",
                "the index is not the distribution's, or --security-keyring is another's",
            )
        return payload.read_text(encoding="utf-8")


class SecurityIndexes:
    """Security suites, each fetched and checked once."""

    def __init__(
        self, keyring: Path | None = None, timeout_s: float = TIMEOUT_S, now: float | None = None
    ) -> None:
        self.keyring = keyring
        self.timeout_s = timeout_s
        self.now = now
        self._read: dict[SecuritySuite, IndexState] = {}

    def state(self, suite: SecuritySuite) -> IndexState:
        """The suite's signed facts and what its Packages index offers."""
        if suite not in self._read:
            self._read[suite] = self._fetch_state(suite)
        return self._read[suite]

    def _fetch_state(self, suite: SecuritySuite) -> IndexState:
        url = suite.in_release_url
        keyring = self.keyring or default_keyring(suite.mirror)
        if keyring is None:
            raise InputError(
                f"no keyring known for {suite.mirror}", "give --security-keyring for a mirror"
            )
        payload = verified_payload(_fetch(url, self.timeout_s), keyring, url)
        facts = release_facts(payload, url)
        if facts.expired(int(self.now if self.now is not None else time.time())):
            raise InputError(
                f"{url} expired on {facts.valid_until}: a stale copy would hide newer fixes",
                "the mirror is out of date; use the distribution's own or a fresher mirror",
            )
        listed = facts.sha256.get(suite.packages_path)
        if listed is None:
            raise InputError(f"{url} lists no {suite.packages_path}", "is the architecture right?")
        compressed = _fetch(suite.packages_url, self.timeout_s)
        digest = hashlib.sha256(compressed).hexdigest()
        if (digest, len(compressed)) != listed:
            raise EngineError(
                f"{suite.packages_url} is not the index {url} signs"
                f" (sha256 {digest[:12]}, {len(compressed)} bytes; signed: {listed[0][:12]},"
                f" {listed[1]} bytes)",
                "a mirror in the middle of an update: run the audit again in a few minutes",
            )
        text = lzma.decompress(compressed).decode("utf-8")
        return IndexState(suite, facts, digest, security_index(text, suite.packages_url))
