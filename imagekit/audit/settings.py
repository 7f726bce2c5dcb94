"""What an audit is asked: its images, what fails one, and what is read beside the index. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from imagekit.audit.allowlist import AllowEntry
from imagekit.audit.findings import Finding
from imagekit.kernel.vocabulary import Threshold


@dataclass(frozen=True)
class AuditTarget:
    """One image to audit: its record name and the reference to read; a published tag is
    pulled first (for its platform), and its audit is attested to the registry's digest."""

    name: str
    reference: str
    published: bool = False
    platform: str | None = None
    digest: str = ""  # the registry's digest of a published tag
    end_of_patch: str | None = None  # YYYY-MM-DD: its release's last day of patches


# Matches an image's Python distributions (name -> version) against advisories.
Matcher = Callable[[Mapping[str, str]], tuple[Finding, ...]]


@dataclass(frozen=True)
class Advisories:
    """What the audit reads beside the security index; `sources` names each (osv:PATH,
    trivy:PATH)."""

    sources: tuple[str, ...] = ()
    matchers: tuple[Matcher, ...] = ()  # an OSV database, matched per image
    reported: tuple[Finding, ...] = ()  # a scanner's report, about the one image audited

    def for_image(self, python: Mapping[str, str]) -> tuple[Finding, ...]:
        """The advisories' findings for an image with these Python distributions."""
        return (*(f for match in self.matchers for f in match(python)), *self.reported)


@dataclass(frozen=True)
class AuditSettings:
    """What fails an image and what is read beside the index (resolved by the request)."""

    threshold: Threshold = Threshold.ANY_FIX
    allowlist: tuple[AllowEntry, ...] = ()
    security_mirror: str | None = None
    advisories: Advisories = field(default_factory=Advisories)
    now: str = ""  # ISO 8601, UTC: when the audit began (each record's audited_at)
