"""The use case of `imagekit audit`: what each image still lacks of its distribution's security
fixes, and what advisories name among its packages, judged against the threshold and recorded.

Per image: its files are read without running it (`ContentsReader`), its release names the
security suite, the suite's signed index says what is fixed (`SecurityIndexSource`), and the
advisories given offline (OSV, a scanner's report) add theirs. Each image's record is written,
sealed, as soon as it is judged, so an interrupted audit keeps what it finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from imagekit.audit.allowlist import AllowEntry
from imagekit.audit.debian import installed_packages, pending_fixes
from imagekit.audit.findings import Finding
from imagekit.audit.policy import Judgement, judge
from imagekit.audit.ports import AuditPorts, IndexState
from imagekit.audit.release import distro, security_suite
from imagekit.audit.report import junit
from imagekit.audit.settings import AuditSettings, AuditTarget
from imagekit.errors import InputError
from imagekit.events import Event, EventKind
from imagekit.kernel.records import (
    AuditFinding,
    AuditRecord,
    ImageRecord,
    SecurityIndexRecord,
    Verdict,
)
from imagekit.kernel.vocabulary import (
    Ecosystem,
    FindingOrigin,
    FindingVerdict,
    Severity,
)


def os_findings(state: IndexState, dpkg_status: str) -> tuple[Finding, ...]:
    """Each installed package the security index has a newer version of, as a finding (the
    index grades nothing: its severity is unknown)."""
    found = []
    for fix in pending_fixes(installed_packages(dpkg_status), state.offered):
        found.append(
            Finding(
                f"{fix.source}@{fix.fixed}",
                fix.package,
                fix.installed,
                fix.fixed,
                Severity.UNKNOWN,
                FindingOrigin.SECURITY_INDEX,
                Ecosystem.OS,
                fix.source,
            )
        )
    return tuple(found)


def _finding_records(judgement: Judgement) -> tuple[AuditFinding, ...]:
    """The judged findings as the record keeps them: the refused first."""

    def row(f: Finding, verdict: FindingVerdict, entry: AllowEntry | None = None) -> AuditFinding:
        where, reason = (entry.where, entry.reason) if entry is not None else ("", "")
        return AuditFinding(**asdict(f), verdict=verdict, allowlist=where, reason=reason)

    return (
        *(row(f, FindingVerdict.REFUSED) for f in judgement.refused),
        *(row(o.finding, FindingVerdict.OUTDATED, o.entry) for o in judgement.outdated),
        *(row(f, FindingVerdict.ALLOWED, entry) for f, entry in judgement.allowed),
        *(row(f, FindingVerdict.NOTED) for f in judgement.noted),
    )


def _arch(platform: str) -> str:
    """dpkg's architecture name of an engine's `linux/amd64`, `linux/arm64/v8`."""
    parts = platform.split("/")
    return parts[1] if len(parts) > 1 and parts[1] else "amd64"


class AuditRun:
    """Audits images one after another, recording each as it is judged."""

    def __init__(self, ports: AuditPorts, settings: AuditSettings) -> None:
        self.ports = ports
        self.settings = settings

    def audit(self, target: AuditTarget) -> AuditRecord:
        """One image audited and recorded; InputError when the engine lacks it."""
        p, s = self.ports, self.settings
        image = p.engine.inspect_image(target.reference)
        if image is None:
            raise InputError(
                f"image {target.reference} is not in the engine", "build it or pull it first"
            )
        p.events(Event(EventKind.STARTED, target.name, "reading its packages"))
        held = p.contents.contents(image.id)
        suite = security_suite(held.os_release, _arch(image.platform), s.security_mirror)
        p.events(Event(EventKind.STEP, target.name, f"reading {suite.in_release_url}"))
        state = p.indexes.state(suite)
        findings = (*os_findings(state, held.dpkg_status), *s.advisories.for_image(held.python))
        judgement = judge(findings, s.allowlist, s.threshold)
        record = AuditRecord(
            image_id=image.id,
            reference=target.reference,
            audited_at=s.now,
            distro=distro(held.os_release),
            security_index=SecurityIndexRecord(
                suite=suite.suite,
                url=suite.in_release_url,
                date=state.facts.date,
                packages_sha256=state.packages_sha256,
            ),
            threshold=s.threshold,
            status=Verdict.of(judgement.passed),
            os_packages=len(installed_packages(held.dpkg_status)),
            python_packages=len(held.python),
            sources=("security-index", *s.advisories.sources),
            findings=_finding_records(judgement),
            problems=tuple(o.line() for o in judgement.outdated),
        )
        p.store.update_image(target.name, ImageRecord(audit=record))
        said = f"{len(judgement.refused)} refused, {len(record.pending_fixes)} pending fixes"
        p.events(Event(EventKind.FINISHED, target.name, said, record.status.value))
        return record

    def execute(self, targets: Sequence[AuditTarget]) -> dict[str, AuditRecord]:
        """Every target audited, in order; then audit-junit.xml of them all."""
        records = {t.name: self.audit(t) for t in targets}
        self.ports.store.write_report("audit-junit.xml", junit(records, self.ports.store.run_id))
        return records
