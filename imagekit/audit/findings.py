"""What an audit finds, from every source, in one shape. Pure.

A pending OS fix comes from the distribution's security index; an advisory from an OSV database
or a scanner's report (Trivy, Grype). Each is a `Finding`: a package, the version installed, the
version that fixes it ("" where none exists yet), and a severity where its source gives one.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.kernel.vocabulary import Ecosystem, FindingOrigin, Severity

# Higher is worse; `unknown` ranks with `critical`: what is not graded is not known to be mild.
RANK = {
    Severity.LOW: 1,
    Severity.MEDIUM: 2,
    Severity.HIGH: 3,
    Severity.CRITICAL: 4,
    Severity.UNKNOWN: 4,
}
_WORDS = {
    "critical": Severity.CRITICAL,
    "high": Severity.HIGH,
    "important": Severity.HIGH,
    "medium": Severity.MEDIUM,
    "moderate": Severity.MEDIUM,
    "low": Severity.LOW,
    "negligible": Severity.LOW,
}


def parse_severity(text: str) -> Severity:
    """A source's word for a severity (`HIGH`, `Moderate`, `negligible`), as ours."""
    return _WORDS.get(text.strip().lower(), Severity.UNKNOWN)


@dataclass(frozen=True)
class Finding:
    """One thing an audit found in one image."""

    id: str  # CVE-…, GHSA-…, PYSEC-…; for a pending OS fix `<source>@<fixed version>`
    package: str
    installed: str
    fixed: str  # "" where no fixed version exists yet
    severity: Severity
    origin: FindingOrigin
    ecosystem: Ecosystem
    source: str = ""  # an OS package's source package (what advisories name)

    @property
    def fixable(self) -> bool:
        """Whether a fixed version exists: a rebuild takes it."""
        return bool(self.fixed)

    def line(self) -> str:
        """`libssl3 3.0.20-1~deb12u2 -> 3.0.22-1~deb12u2 (openssl@3.0.22-1~deb12u2, unknown)`."""
        fixed = self.fixed or "no fix yet"
        return f"{self.package} {self.installed} -> {fixed} ({self.id}, {self.severity})"
