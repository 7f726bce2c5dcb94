"""Adapter: an audit wired to the world. Every file the request names is read and checked
before the engine is asked anything; then the engine, the security index and the run folder."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from imagekit.adapters import engine as docker
from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.image_contents import EngineContents
from imagekit.adapters.results import RunFacts, RunFolder, results_key
from imagekit.adapters.security_index import SecurityIndexes
from imagekit.audit.allowlist import AllowEntry, parse_allowlist
from imagekit.audit.findings import Finding
from imagekit.audit.osv import python_findings, read_osv
from imagekit.audit.ports import AuditPorts
from imagekit.audit.requests import AuditCommand
from imagekit.audit.scanners import scanner_findings
from imagekit.audit.settings import Advisories, AuditSettings, AuditTarget, Matcher
from imagekit.errors import InputError
from imagekit.events import EventSink
from imagekit.kernel.reference import record_name


def audit_targets(request: AuditCommand) -> list[AuditTarget]:
    """The images named, else the selected images of the matrix."""
    if request.images:
        return [AuditTarget(record_name(ref), ref) for ref in request.images]
    return [AuditTarget(p.name, p.reference) for p in request.selection.plans()]


def _text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{what} {path}: {exc}") from None


def _allowlist(path: Path | None, today: dt.date) -> tuple[AllowEntry, ...]:
    return parse_allowlist(_text(path, "--allowlist"), str(path), today) if path else ()


def _advisories(request: AuditCommand, targets: Sequence[AuditTarget]) -> Advisories:
    sources: list[str] = []
    matchers: list[Matcher] = []
    reported: tuple[Finding, ...] = ()
    if request.osv is not None:
        matchers.append(partial(python_findings, read_osv(request.osv)))
        sources.append(f"osv:{request.osv}")
    if request.scanner_report is not None:
        if len(targets) != 1:
            raise InputError(
                f"--scanner-report is about one image, and {len(targets)} are audited",
                "audit the image the report is of, by name or with --only",
            )
        origin, reported = scanner_findings(request.scanner_report)
        sources.append(f"{origin}:{request.scanner_report}")
    return Advisories(tuple(sources), tuple(matchers), reported)


def open_audit(
    request: AuditCommand, checks: Sequence[Callable[[DockerEngine], None]], events: EventSink
) -> tuple[AuditPorts, AuditSettings, list[AuditTarget]]:
    """The audit's ports (its run folder made, run.json written; records sealed with
    IMAGEKIT_RESULTS_KEY when set), settings and targets; bad input is refused before the
    engine is opened."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    targets = audit_targets(request)
    settings = AuditSettings(
        threshold=request.refuse,
        allowlist=_allowlist(request.allowlist, now.date()),
        security_mirror=request.security_mirror,
        advisories=_advisories(request, targets),
        now=now.isoformat(),
    )
    RunFolder.check_writable(request.results)
    engine = docker.open_engine()
    for check in checks:
        check(engine)
    key = results_key()
    facts = RunFacts(images=[t.reference for t in targets], sealed_with_key=key is not None)
    folder = RunFolder.begin(request.results, "audit", engine.info(), facts, seal_key=key)
    indexes = SecurityIndexes(request.security_keyring)
    return AuditPorts(engine, EngineContents(engine), indexes, folder, events), settings, targets
