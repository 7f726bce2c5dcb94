"""Whether an image's findings pass the team's threshold. Pure.

The threshold (`--refuse`, and publish's gate) is one of:
- `any-fix`: any finding that has a fixed version fails (a rebuild would take it);
- `critical`, `high`, `medium`, `low`: any finding of that severity or worse fails, fixed
  version or not; a finding its source does not grade (the security index grades nothing)
  counts as the worst, so only a graded report can let it through;
- `none`: nothing fails; the findings are recorded.
An allowlisted finding does not fail, unless it has a fixed version: then the entry is outdated
and the audit fails on it, naming the entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from imagekit.audit.allowlist import AllowEntry
from imagekit.audit.findings import RANK, Finding
from imagekit.kernel.vocabulary import Severity, Threshold


def refuses(threshold: Threshold, finding: Finding) -> bool:
    """Whether `finding` fails an audit at `threshold` (before the allowlist)."""
    if threshold == Threshold.NONE:
        return False
    if threshold == Threshold.ANY_FIX:
        return finding.fixable
    return RANK[finding.severity] >= RANK[Severity(threshold.value)]


@dataclass(frozen=True)
class Outdated:
    """An allowlist entry whose finding now has a fix."""

    entry: AllowEntry
    finding: Finding

    def line(self) -> str:
        """What the user reads, with the remedy."""
        return (
            f"allowlist outdated: {self.entry.where}: {self.finding.id} in"
            f" {self.finding.package} is fixed in {self.finding.fixed}; rebuild and drop the entry"
        )


@dataclass(frozen=True)
class Judgement:
    """An image's findings, sorted by what they mean for it."""

    refused: tuple[Finding, ...]
    allowed: tuple[tuple[Finding, AllowEntry], ...]
    outdated: tuple[Outdated, ...]
    noted: tuple[Finding, ...]  # below the threshold

    @property
    def passed(self) -> bool:
        return not self.refused and not self.outdated


def judge(
    findings: Iterable[Finding], allowlist: Iterable[AllowEntry], threshold: Threshold
) -> Judgement:
    """Each finding refused, accepted by an entry, outdating its entry, or noted."""
    entries = tuple(allowlist)
    refused, allowed, outdated, noted = [], [], [], []
    for finding in findings:
        entry = next((e for e in entries if e.matches(finding)), None)
        if entry is not None and finding.fixable:
            outdated.append(Outdated(entry, finding))
        elif entry is not None:
            allowed.append((finding, entry))
        elif refuses(threshold, finding):
            refused.append(finding)
        else:
            noted.append(finding)
    return Judgement(tuple(refused), tuple(allowed), tuple(outdated), tuple(noted))
