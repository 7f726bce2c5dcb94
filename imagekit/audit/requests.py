"""The request of `imagekit audit`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import JSON, REGISTRY, RESULTS, SIGNING_KEY, Arg, Opt
from imagekit.matrix.selection import Selection


@dataclass(frozen=True)
class AuditCommand:
    """Audit images for security fixes they lack and advisories on their packages; the matrix's
    `security:` section says what fails one."""

    selection: Selection
    images: Annotated[tuple[str, ...], Arg(help="Images to audit (default: the matrix's).")] = ()
    osv: Annotated[
        Path | None,
        Opt("--osv", help="An OSV export (zip or folder) for the Python packages."),
    ] = None
    scanner_report: Annotated[
        Path | None, Opt("--scanner-report", help="A Trivy or Grype JSON report of the one image.")
    ] = None
    published: Annotated[
        bool, Opt("--published", help="Audit each image's newest published tag (pulled).")
    ] = False
    registry: Annotated[str | None, REGISTRY] = None
    signing_key: Annotated[str | None, SIGNING_KEY] = None  # attests each published tag's audit
    results: Annotated[Path, RESULTS] = Path("results")
    json: Annotated[bool, JSON] = False

    def __post_init__(self) -> None:
        self.selection.beside(self.images)
        if self.images and self.published:
            raise InputError("--published audits the matrix's tags; name no image with it")
