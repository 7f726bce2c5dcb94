"""Adapter: the world a publish works through (`PublishPorts`), made from the command's values:
the registry over HTTP, the run folder, the verify records the gate reads, the audit it runs
when the matrix has a `security:` section, the SBOM maker and cosign when there is a key to
sign with."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from imagekit.adapters import engine as docker
from imagekit.adapters.auditing import gate_audit
from imagekit.adapters.cosign import cosign_with
from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.registry import HttpRegistry
from imagekit.adapters.results import (
    RunFacts,
    RunFolder,
    build_evidence,
    results_key,
    verify_evidence,
)
from imagekit.adapters.sbom import CycloneDx
from imagekit.events import EventSink
from imagekit.matrix.load import Matrix
from imagekit.publish.ports import PublishPorts
from imagekit.publish.requests import PublishCommand


def publish_ports(
    request: PublishCommand,
    matrix: Matrix,
    events: EventSink,
    opened: Callable[[DockerEngine], None],
) -> tuple[PublishPorts, DockerEngine | None]:
    """The ports `request` publishes through, its run folder made and its run.json written, and
    the engine its mode pushes from, handed to `opened` first (None for a promotion, which works
    inside the registry). A signing key and the files of the matrix's `security:` section are
    checked before the engine is asked anything."""
    settings, key = request.settings, request.signing
    signer = cosign_with("--signing-key", key, timeout_s=request.deadline_s) if key else None
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    gate = gate_audit(matrix, now) if settings.mode.needs_engine else None
    engine = docker.open_engine() if settings.mode.needs_engine else None
    if engine is not None:
        opened(engine)
    about = RunFacts(registry=settings.registry, force=settings.force, signed=signer is not None)
    run = RunFolder.begin(request.results, "publish", engine.info() if engine else None, about)
    registry = HttpRegistry(
        engine,
        attempts=request.attempts,
        backoff_s=request.backoff_s,
        deadline_s=request.deadline_s,
    )
    evidence = verify_evidence(request.results, results_key())
    audit = gate(engine, run, events) if gate is not None and engine is not None else None
    builds = build_evidence(request.results)
    ports = PublishPorts(registry, run, evidence, events, CycloneDx(), signer, audit, builds)
    return ports, engine
