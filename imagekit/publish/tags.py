"""The tags publish would push, as rows for people. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from imagekit.kernel.vocabulary import TagKind
from imagekit.matrix.plan import ImagePlan


def tag_rows(
    selected: Sequence[ImagePlan], plans: Sequence[ImagePlan], registry: str | None
) -> list[list[str]]:
    """[image, tag, kind] for every tag publish would push for `selected` (of the matrix's
    `plans`): each platform's own tag when an image has several, then the versioned tag and
    the aliases, once per image."""
    from collections import Counter

    from imagekit.matrix.plan import retarget
    from imagekit.publish.multiarch import platform_tag

    platforms = Counter((p.repository, p.tag) for p in plans)
    rows = []
    listed: set[tuple[str, str]] = set()
    for plan in selected:
        repository = retarget(plan.repository, registry)
        image = (plan.repository, plan.tag)
        if platforms[image] > 1:
            # One manifest per platform under its own tag; the image's tags name their index.
            rows.append(
                [
                    plan.name,
                    f"{repository}:{platform_tag(plan.tag, plan.platform)}",
                    TagKind.PLATFORM,
                ]
            )
        if image in listed:
            continue
        listed.add(image)
        rows.append([plan.name, f"{repository}:{plan.tag}", TagKind.VERSIONED])
        rows += [[plan.name, f"{repository}:{alias}", TagKind.ALIAS] for alias in plan.aliases]
    return rows


def tag_document(rows: Sequence[Sequence[str]]) -> list[dict[str, str]]:
    """`imagekit tags --json`: each row as {image, tag, kind}."""
    return [{"image": image, "tag": tag, "kind": kind} for image, tag, kind in rows]
