"""The requests of the commands that publish images and check them: publish, attest verify."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from imagekit.errors import InputError
from imagekit.kernel.options import JSON, REGISTRY, RESULTS, SIGNING_KEY, Arg, Opt
from imagekit.matrix.plan import ImagePlan, retarget
from imagekit.matrix.selection import Selection
from imagekit.publish.attest import RequiredLevel, Requirement
from imagekit.publish.decisions import PublishMode


@dataclass(frozen=True)
class PublishSettings:
    """How `imagekit publish` publishes: its options, taken by `publish_images` as they are."""

    registry: Annotated[str | None, REGISTRY] = None
    dry_run: Annotated[
        bool, Opt("--dry-run/--no-dry-run", help="Check everything, push nothing.")
    ] = False
    force: Annotated[
        bool, Opt("--force/--no-force", help="Publish despite the gate (recorded in the results).")
    ] = False
    candidate: Annotated[
        str | None,
        Opt(
            "--candidate",
            help="Push only TAG-candidate-ID of each gated image, nothing else (CI, before "
            "the other jobs verify it).",
        ),
    ] = None
    from_candidate: Annotated[
        str | None,
        Opt(
            "--from-candidate",
            help="Promote TAG-candidate-ID inside the registry: the same manifest under the "
            "versioned tag and the aliases, gated on records for the image it holds; no pull, "
            "no engine.",
        ),
    ] = None
    patch: Annotated[
        bool, Opt("--patch", help="Publish a rebuild as TAG-pN where its tag holds another image.")
    ] = False

    def __post_init__(self) -> None:
        if self.candidate and self.from_candidate:
            raise InputError(
                "--candidate pushes a candidate and --from-candidate publishes one; pick one"
            )

    @property
    def mode(self) -> PublishMode:
        """What this publish does, decided from its candidate options."""
        return PublishMode.of(self.candidate, self.from_candidate)

    def repository(self, plan: ImagePlan) -> str:
        """Where `plan` is published."""
        return retarget(plan.repository, self.registry)

    @property
    def candidate_id(self) -> str:
        """The CI run id a candidate is pushed or promoted under; "" to push."""
        return self.candidate or self.from_candidate or ""


@dataclass(frozen=True)
class PublishCommand:
    """Push the tags of images that passed verification (exit 6 if any is refused or fails).

    In CI, --candidate ID pushes one pre-release tag per image after its first verification,
    and --from-candidate ID later promotes those candidates to the final tags inside the
    registry, once every verification passed."""

    selection: Selection
    settings: PublishSettings = field(default_factory=PublishSettings)
    attempts: Annotated[int, Opt("--attempts", min=1, max=10, help="Tries per tag.")] = 4
    deadline_s: Annotated[
        float,
        Opt(
            "--deadline-s",
            min=1,
            help="Stop retrying the registry once this many seconds have passed.",
        ),
    ] = 300.0
    backoff_s: Annotated[
        float, Opt("--backoff-s", min=0, help="First retry delay; doubles each time.")
    ] = 2.0
    results: Annotated[Path, RESULTS] = Path("results")
    json: Annotated[bool, JSON] = False
    signing_key: Annotated[str | None, SIGNING_KEY] = None  # a file, or a URI cosign resolves

    @property
    def signing(self) -> str | None:
        """The key to sign with: none on a dry run, which pushes nothing to sign."""
        return None if self.settings.dry_run else self.signing_key


@dataclass(frozen=True)
class AttestVerifyRequest:
    """Check that IMAGE is signed by KEY and that its attested verify record reaches what is
    required. Exit 8, with one line saying why, when the image is unsigned, signed by another
    key, or its record falls short."""

    image: Annotated[str, Arg(help="The image: REGISTRY/REPOSITORY:TAG or @DIGEST.")]
    key: Annotated[str, Opt("--key", help="The cosign public key the image must be signed with.")]
    require_level: Annotated[
        RequiredLevel | None,
        Opt("--require-level", help="The level the attested verify record must reach."),
    ] = None
    require_probes: Annotated[
        tuple[str, ...],
        Opt("--require-probe", help="A probe that must have passed (repeatable)."),
    ] = ()
    require_audit_within: Annotated[
        int | None,
        Opt("--require-audit-within", min=0, metavar="DAYS", help="An attested audit that passed, "
            "this many days old at most."),
    ] = None  # fmt: skip
    require_no_pending: Annotated[
        bool, Opt("--require-no-pending", help="The newest attested audit lists no pending fix.")
    ] = False
    require_provenance: Annotated[
        bool, Opt("--require-provenance", help="A build provenance statement of this image.")
    ] = False
    json: Annotated[bool, JSON] = False

    def requirement(self) -> Requirement:
        """What the image's attested record must show."""
        audit, no_pending = self.require_audit_within, self.require_no_pending
        made = self.require_provenance
        return Requirement(self.require_level, self.require_probes, audit, no_pending, made)
