"""What `imagekit publish` decides, pure: its mode, the tags of each image, and its verdict.

Publish runs in one of three modes, decided from `--candidate` and `--from-candidate`
(`PublishMode.of`): push a local image under its versioned tag and aliases; push it only as a CI
candidate (`{tag}-candidate-{id}`); or promote such a candidate to the final tags inside the
registry (no engine). `publish/run.py` picks the publisher of the mode; the records it returns
are judged here (`publish_failure`) for the exit code and message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from imagekit.errors import EngineError, ImagekitError, PublishError
from imagekit.kernel.publish_records import PublishRecord, PublishStatus, TagRecord
from imagekit.kernel.text import table
from imagekit.kernel.vocabulary import TagKind
from imagekit.matrix.plan import ImagePlan
from imagekit.publish.multiarch import platform_tag


class PublishMode(StrEnum):
    """What one publish does with each image."""

    PUSH = "push"  # a local image under its versioned tag and aliases
    CANDIDATE = "candidate"  # a local image under its CI candidate tag only
    PROMOTION = "promotion"  # a candidate's manifest under the final tags, inside the registry

    @classmethod
    def of(cls, candidate: str | None, from_candidate: str | None) -> PublishMode:
        """The mode `--candidate` and `--from-candidate` ask for (neither: push)."""
        if candidate:
            return cls.CANDIDATE
        return cls.PROMOTION if from_candidate else cls.PUSH

    @property
    def needs_engine(self) -> bool:
        """Whether this mode pushes local images (a promotion works inside the registry)."""
        return self is not PublishMode.PROMOTION

    @property
    def partial(self) -> bool:
        """Whether one platform of a multi-platform image may be selected alone: a candidate's
        platforms are pushed by their own CI jobs, and promotion joins them."""
        return self is PublishMode.CANDIDATE


def candidate_tag(tag: str, candidate: str) -> str:
    """The pre-release tag CI pushes before verification on every runner has passed."""
    return f"{tag}-candidate-{candidate}"


def final_tags(plan: ImagePlan) -> list[tuple[str, TagKind]]:
    """The tags an image is published under, in order: its versioned tag, then its aliases."""
    return [(plan.tag, TagKind.VERSIONED), *((a, TagKind.ALIAS) for a in plan.aliases)]


def platform_tags(plan: ImagePlan) -> list[tuple[str, TagKind]]:
    """The one tag a platform of a multi-platform image is pushed under (its index takes the
    image's tags)."""
    return [(platform_tag(plan.tag, plan.platform), TagKind.VERSIONED)]


def candidate_tags(plan: ImagePlan, candidate: str, *, multi: bool) -> list[tuple[str, TagKind]]:
    """The one tag a CI candidate is pushed under; a platform of a multi-platform image gets
    its platform's (`{tag}-candidate-{id}-{arch}`), promotion joins them in one index."""
    tag = candidate_tag(plan.tag, candidate)
    return [(platform_tag(tag, plan.platform) if multi else tag, TagKind.CANDIDATE)]


def said(exc: ImagekitError) -> str:
    """What the registry's (or the engine's) failure means, with what to do, on one line."""
    return f"{exc.message}; {exc.hint}" if exc.hint else exc.message


@dataclass(frozen=True)
class Pushed:
    """What putting an image's tags on the registry did: the status it reached, the tags
    recorded, and the reasons to add to the image's own (the gate's)."""

    status: PublishStatus
    tags: tuple[TagRecord, ...] = ()
    reasons: tuple[str, ...] = ()

    @property
    def reached(self) -> bool:
        """Whether every tag is on the registry now (pushed or already there), so the image
        is inventoried and signed."""
        return self.status in (PublishStatus.PUBLISHED, PublishStatus.UNCHANGED)


def pushed_or_unchanged(tags: Sequence[TagRecord]) -> PublishStatus:
    """PUBLISHED when any tag was put on the registry, UNCHANGED when all were there."""
    fresh = any(t.status is PublishStatus.PUBLISHED for t in tags)
    return PublishStatus.PUBLISHED if fresh else PublishStatus.UNCHANGED


def publish_failure(
    done: Sequence[PublishRecord], engine_errors: Sequence[EngineError]
) -> ImagekitError | None:
    """The error a publish ends with, or None when every image was published: the engine's
    (exit 3) when it refused something, else a PublishError (exit 6) naming each image not
    published, with the hint that fits (verify first when one was refused by the gate)."""
    bad = [r for r in done if not r.status.ok]
    if engine_errors:
        first = engine_errors[0]
        return EngineError(
            f"{len(bad)} of {len(done)} images not published; the engine refused "
            f"{len(engine_errors)}: {first.message}",
            first.hint,
        )
    if not bad:
        return None
    refused = any(r.status is PublishStatus.REFUSED for r in bad)
    return PublishError(
        f"{len(bad)} of {len(done)} images not published: "
        + "; ".join(f"{r.name}: {r.status}" for r in bad),
        "verify them first (imagekit verify); the reasons are above"
        if refused
        else "the registry's reasons are above",
    )


def publish_table(done: Sequence[PublishRecord]) -> str:
    """What `imagekit publish` prints: each image, its status, its tags and its reasons."""
    return table(["IMAGE", "STATUS", "TAGS", "REASONS"], publish_rows(done))


def publish_rows(done: Sequence[PublishRecord]) -> list[list[str]]:
    """The rows of publish's table (IMAGE, STATUS, TAGS, REASONS), one per record."""
    return [
        [
            r.name,
            r.status + (" (forced)" if r.forced else ""),
            ", ".join(t.tag.rsplit(":", 1)[1] + "=" + t.status for t in r.tags),
            "; ".join(r.reasons)[:100],
        ]
        for r in done
    ]
