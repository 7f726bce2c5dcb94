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

from imagekit import __version__
from imagekit.audit.allowlist import AllowEntry
from imagekit.audit.attestation import AUDIT_PREDICATE, AuditPredicate
from imagekit.audit.debian import installed_packages, pending_fixes
from imagekit.audit.findings import Finding
from imagekit.audit.policy import Judgement, judge
from imagekit.audit.ports import AuditPorts, IndexState
from imagekit.audit.release import distro, dpkg_arch, security_suite
from imagekit.audit.report import junit
from imagekit.audit.settings import AuditSettings, AuditTarget
from imagekit.errors import EngineError, InputError, RegistryError
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


class AuditRun:
    """Audits images one after another, recording each as it is judged."""

    def __init__(self, ports: AuditPorts, settings: AuditSettings) -> None:
        self.ports = ports
        self.settings = settings
        self.unattested: list[str] = []  # why each audit of a published tag was not attested

    def audit(self, target: AuditTarget) -> AuditRecord:
        """One image audited and recorded (a published tag pulled first, its audit attested
        after); InputError when the engine lacks it."""
        p, s = self.ports, self.settings
        if target.published:
            p.events(Event(EventKind.STARTED, target.name, f"pulling {target.reference}"))
            if reason := p.engine.pull(target.reference, target.platform):
                raise EngineError(
                    f"could not pull {target.reference}: {reason}",
                    "check that the registry answers and that you may read the tag",
                )
        image = p.engine.inspect_image(target.reference)
        if image is None:
            raise InputError(
                f"image {target.reference} is not in the engine", "build it or pull it first"
            )
        p.events(Event(EventKind.STARTED, target.name, "reading its packages"))
        held = p.contents.contents(image.id)
        suite = security_suite(held.os_release, dpkg_arch(image.platform), s.security_mirror)
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
            end_of_patch=target.end_of_patch,
        )
        p.store.update_image(target.name, ImageRecord(audit=record))
        if target.published and p.attester is not None:
            self._attest(target, record)
        said = f"{len(judgement.refused)} refused, {len(record.pending_fixes)} pending fixes"
        p.events(Event(EventKind.FINISHED, target.name, said, record.status.value))
        return record

    def _attest(self, target: AuditTarget, record: AuditRecord) -> None:
        """The audit of a published tag, attached to its digest as a signed attestation."""
        assert self.ports.attester is not None
        repository = target.reference.rpartition(":")[0]
        said = AuditPredicate(
            reference=repository, digest=target.digest, audit=record, imagekit_version=__version__
        )
        subject = f"{repository}@{target.digest}"
        error = self.ports.attester.attest(subject, AUDIT_PREDICATE, said.to_json())
        if error:
            self.unattested.append(f"{subject}: {error}")
        else:
            self.ports.events(Event(EventKind.STEP, target.name, f"attested to {subject}"))

    def attestation_failure(self) -> RegistryError | None:
        """The error an audit ends with when an audit could not be attested (exit 6)."""
        if not self.unattested:
            return None
        return RegistryError(
            f"{len(self.unattested)} audits not attested: " + "; ".join(self.unattested),
            "the records are kept; check the key and the registry, then audit again",
        )

    def execute(self, targets: Sequence[AuditTarget]) -> dict[str, AuditRecord]:
        """Every target audited, in order; then audit-junit.xml of them all."""
        records = {t.name: self.audit(t) for t in targets}
        self.ports.store.write_report("audit-junit.xml", junit(records, self.ports.store.run_id))
        return records
