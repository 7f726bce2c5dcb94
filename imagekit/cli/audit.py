"""`imagekit audit`: the security fixes each image lacks and the advisories on its packages."""

from __future__ import annotations

from imagekit.audit.requests import AuditCommand
from imagekit.cli.common import app, note_leftovers, say, show
from imagekit.cli.options import command


@command(app, "audit", AuditCommand)
def audit(request: AuditCommand) -> None:
    """Audit the images, print each one's outcome, exit 9 when one fails the threshold."""
    from imagekit.adapters.auditing import open_audit
    from imagekit.adapters.progress import PlainView
    from imagekit.audit.report import audit_document, audit_failure, audit_table
    from imagekit.audit.run import AuditRun

    ports, settings, targets = open_audit(request, [note_leftovers], PlainView())
    run = AuditRun(ports, settings)
    records, folder = run.execute(targets), ports.store
    show(request.json, audit_document(records, folder.run_id), audit_table(records))
    say(f"results: {folder.root}")
    if (error := audit_failure(records) or run.attestation_failure()) is not None:
        raise error
