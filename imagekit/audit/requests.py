"""The request of `imagekit audit`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import JSON, RESULTS, Arg, Opt
from imagekit.kernel.vocabulary import Threshold
from imagekit.matrix.selection import Selection


@dataclass(frozen=True)
class AuditCommand:
    """Audit images for security fixes they lack and advisories on their packages."""

    selection: Selection
    images: Annotated[tuple[str, ...], Arg(help="Images to audit (default: the matrix's).")] = ()
    refuse: Annotated[
        Threshold, Opt("--refuse", help="What fails an image: any-fix, a severity or worse, none.")
    ] = Threshold.ANY_FIX
    allowlist: Annotated[
        Path | None,
        Opt("--allowlist", help="Accepted findings: YAML of id, package, reason, expires."),
    ] = None
    osv: Annotated[
        Path | None,
        Opt("--osv", help="An OSV export (zip or folder) for the Python packages."),
    ] = None
    scanner_report: Annotated[
        Path | None, Opt("--scanner-report", help="A Trivy or Grype JSON report of the one image.")
    ] = None
    security_mirror: Annotated[
        str | None, Opt("--security-mirror", help="Read the security suite from this mirror.")
    ] = None
    security_keyring: Annotated[
        Path | None, Opt("--security-keyring", help="The keyring that signs the mirror's suites.")
    ] = None
    results: Annotated[Path, RESULTS] = Path("results")
    json: Annotated[bool, JSON] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "refuse", Threshold(self.refuse))
        if self.images and (self.selection.only or self.selection.flavour):
            raise InputError(
                "--only and --flavour pick images of the matrix, not those named",
                "name the images, or use --only/--flavour without them",
            )
