"""What an audit says: the table, JUnit, and the error it ends with. Pure."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping

from imagekit.errors import AuditFailedError
from imagekit.kernel.json import JsonObject
from imagekit.kernel.records import AuditRecord, Verdict
from imagekit.kernel.text import table
from imagekit.kernel.vocabulary import FindingVerdict


def audit_table(records: Mapping[str, AuditRecord]) -> str:
    """One row per image: its status, pending fixes, findings refused, the index it read."""
    rows = []
    for name, r in records.items():
        refused = [f for f in r.findings if f.verdict == FindingVerdict.REFUSED]
        index = f"{r.security_index.suite} ({r.security_index.date})"
        ended = f" (unsupported since {r.end_of_patch})" if r.unsupported else ""
        status = r.status.value + ended
        rows.append([name, status, str(len(r.pending_fixes)), str(len(refused)), index])
    return table(["image", "audit", "pending fixes", "refused", "security index"], rows)


def audit_document(records: Mapping[str, AuditRecord], run_id: str) -> JsonObject:
    """What `imagekit audit --json` prints: the run, and each image's audit record."""
    return {"run_id": run_id, "images": {n: {"audit": r.to_json()} for n, r in records.items()}}


def failure_lines(record: AuditRecord) -> list[str]:
    """What fails an image, a line each: each refused finding, then each outdated entry."""
    refused = [
        f"{f.package} {f.installed} -> {f.fixed or 'no fix yet'} ({f.id}, {f.severity})"
        for f in record.findings
        if f.verdict == FindingVerdict.REFUSED
    ]
    return [*refused, *record.problems]


def junit(records: Mapping[str, AuditRecord], run_id: str) -> str:
    """audit-junit.xml: one testcase per image, failed with the findings that fail it."""
    suite = ET.Element("testsuite", name=f"imagekit audit {run_id}")
    failures = 0
    for name, record in records.items():
        case = ET.SubElement(suite, "testcase", classname=name, name="audit")
        if record.status == Verdict.FAIL:
            failures += 1
            lines = failure_lines(record)
            said = f"{len(lines)} findings fail the threshold {record.threshold}"
            ET.SubElement(case, "failure", message=said).text = "\n".join(lines)
    suite.set("tests", str(len(records)))
    suite.set("failures", str(failures))
    ET.indent(suite)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
    )


def audit_failure(records: Mapping[str, AuditRecord]) -> AuditFailedError | None:
    """The error an audit ends with when an image failed (exit 9), naming each one's findings
    and the remedy; None when every image passed."""
    failed = {name: r for name, r in records.items() if r.status == Verdict.FAIL}
    if not failed:
        return None
    lines = [f"{name}: {line}" for name, r in failed.items() for line in failure_lines(r)]
    return AuditFailedError(
        f"{len(failed)} of {len(records)} images fail the audit:\n  " + "\n  ".join(lines),
        "bootstrap the base again (imagekit base bootstrap takes the security suite's fixes)"
        " and rebuild on it; accept a finding with no fix yet in the file the matrix's"
        " security.allowlist names, with its reason and expiry",
    )
