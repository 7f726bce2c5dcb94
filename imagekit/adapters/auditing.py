"""Adapter: an audit wired to the world. Every file the request names is read and checked
before the engine is asked anything; then the engine, the security index and the run folder."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from imagekit.adapters import engine as docker
from imagekit.adapters.cosign import cosign_with
from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.image_contents import EngineContents
from imagekit.adapters.registry import HttpRegistry
from imagekit.adapters.results import RunFacts, RunFolder, results_key
from imagekit.adapters.security_index import SecurityIndexes
from imagekit.audit.allowlist import AllowEntry, parse_allowlist
from imagekit.audit.findings import Finding
from imagekit.audit.osv import python_findings, read_osv
from imagekit.audit.ports import AuditPorts, AuditWith
from imagekit.audit.requests import AuditCommand
from imagekit.audit.scanners import scanner_findings
from imagekit.audit.settings import Advisories, AuditSettings, AuditTarget, Matcher
from imagekit.errors import InputError
from imagekit.events import EventSink
from imagekit.kernel.reference import record_name
from imagekit.kernel.store import RunStore
from imagekit.matrix.load import Matrix
from imagekit.matrix.plan import retarget
from imagekit.matrix.schema import SecuritySpec
from imagekit.publish.patches import newest_tag
from imagekit.publish.ports import Registry


def _matrix(request: AuditCommand) -> Matrix | None:
    """The matrix: its images are audited unless images are named, and its `security:` section
    says what fails one. Images named where there is no matrix file take the defaults."""
    if request.images and not request.selection.matrix.exists():
        return None
    return request.selection.load()


def audit_targets(
    request: AuditCommand, matrix: Matrix | None, registry: Registry
) -> list[AuditTarget]:
    """The images named, else the selected images of the matrix: with `--published`, the
    newest tag each has on the registry (its highest patch tag, else its versioned tag)."""
    if request.registry and not request.published:
        raise InputError("--registry names where --published reads the tags", "add --published")
    if request.images or matrix is None:
        return [AuditTarget(record_name(ref), ref) for ref in request.images]
    plans = request.selection.plans(matrix)
    if not request.published:
        return [AuditTarget(p.name, p.reference) for p in plans]
    targets = []
    listed: dict[str, tuple[str, ...]] = {}
    for plan in plans:
        repository = retarget(plan.repository, request.registry)
        if repository not in listed:
            listed[repository] = registry.list_tags(repository)
        newest = newest_tag(plan.tag, listed[repository])
        held = registry.manifest(f"{repository}:{newest}") if newest else None
        if held is None:
            continue  # never published: nothing to audit
        reference, eop = f"{repository}:{newest}", plan.cell.end_of_patch
        targets.append(AuditTarget(plan.name, reference, True, plan.platform, held.digest, eop))
    return targets


def _beside(matrix: Matrix, key: str, named: str) -> Path:
    """A file the matrix's `security.KEY` names, relative to the matrix; it must be readable."""
    path = Path(matrix.path).parent / named
    if not path.is_file() or not os.access(path, os.R_OK):
        raise InputError(
            f"{matrix.path}: security.{key} {named}: no readable file {path}",
            "name the file relative to the matrix",
        )
    return path


def _allowlist(matrix: Matrix, named: str, today: dt.date) -> tuple[AllowEntry, ...]:
    """The entries of the file the matrix's `security.allowlist` names."""
    path = _beside(matrix, "allowlist", named)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: {exc}", "an allowlist is YAML text") from None
    return parse_allowlist(text, str(path), today)


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


def security_reader(matrix: Matrix | None) -> tuple[SecurityIndexes, str | None]:
    """The reader of the security suites the matrix's `security:` section names (its keyring
    checked here), and its mirror (None: each distribution's own); the build reads them too."""
    security = (matrix.spec.security if matrix is not None else None) or SecuritySpec()
    keyring = None
    if matrix is not None and security.keyring:
        keyring = _beside(matrix, "keyring", security.keyring)
    return SecurityIndexes(keyring), security.mirror


def security_policy(
    matrix: Matrix | None, now: dt.datetime, advisories: Advisories | None = None
) -> tuple[AuditSettings, SecurityIndexes]:
    """What the matrix's `security:` section asks of an audit (the defaults without a matrix),
    and the reader of the security index it names; its files are read and checked here."""
    security = (matrix.spec.security if matrix is not None else None) or SecuritySpec()
    allowlist: tuple[AllowEntry, ...] = ()
    if matrix is not None and security.allowlist:
        allowlist = _allowlist(matrix, security.allowlist, now.date())
    indexes, mirror = security_reader(matrix)
    settings = AuditSettings(
        threshold=security.refuse,
        allowlist=allowlist,
        security_mirror=mirror,
        advisories=advisories or Advisories(),
        now=now.isoformat(),
    )
    return settings, indexes


def gate_audit(
    matrix: Matrix, now: dt.datetime
) -> Callable[[DockerEngine, RunStore, EventSink], AuditWith] | None:
    """The audit publish's gate runs when the matrix has a `security:` section: its files are
    checked now, and it is wired once the engine and the run folder are there; None without
    the section."""
    if matrix.spec.security is None:
        return None
    settings, indexes = security_policy(matrix, now)

    def wired(engine: DockerEngine, store: RunStore, events: EventSink) -> AuditWith:
        return AuditWith(
            AuditPorts(engine, EngineContents(engine), indexes, store, events), settings
        )

    return wired


def open_audit(
    request: AuditCommand, checks: Sequence[Callable[[DockerEngine], None]], events: EventSink
) -> tuple[AuditPorts, AuditSettings, list[AuditTarget]]:
    """The audit's ports (its run folder made, run.json written; records sealed with
    IMAGEKIT_RESULTS_KEY when set), settings and targets; bad input is refused before the
    engine is opened."""
    matrix = _matrix(request)
    key = request.signing_key
    attester = cosign_with("--signing-key", key) if key and request.published else None
    registry = HttpRegistry(None, attempts=4, backoff_s=2.0, deadline_s=300.0)
    targets = audit_targets(request, matrix, registry)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    settings, indexes = security_policy(matrix, now, _advisories(request, targets))
    RunFolder.check_writable(request.results)
    engine = docker.open_engine()
    for check in checks:
        check(engine)
    seal = results_key()
    facts = RunFacts(images=[t.reference for t in targets], sealed_with_key=seal is not None)
    folder = RunFolder.begin(request.results, "audit", engine.info(), facts, seal_key=seal)
    ports = AuditPorts(engine, EngineContents(engine), indexes, folder, events, attester)
    return ports, settings, targets
