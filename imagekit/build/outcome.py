"""What one image's build came to, in words (pure): why it cannot start, why it failed its
budget, and the line a view shows when it is done."""

from __future__ import annotations

from imagekit.kernel.records import BuildRecord
from imagekit.matrix.plan import ImagePlan


def platform_mismatch(parent_platform: str, plan: ImagePlan) -> str | None:
    """Why the image a build starts FROM cannot make `plan`'s platform (None: it can, or the
    engine did not say): an amd64 base under an arm64 image would give an amd64 image that
    says it is arm64."""
    found = "/".join(parent_platform.split("/")[:2])  # linux/arm64/v8 -> linux/arm64
    if not found or found == plan.platform:
        return None
    parent = "base image" if not plan.flavour.workstation else "slim image"
    return (
        f"the {parent} is {found}, not {plan.platform}: give bases a {plan.platform} image "
        f"(`bases: {{OS: {{{plan.platform}: IMAGE}}}}`, e.g. one `imagekit base bootstrap "
        f"--arch {plan.platform.split('/')[1]}` makes)"
    )


def missing_parent(plan: ImagePlan, reference: str, pull_failure: str) -> str:
    """Why a build cannot start: the image it starts FROM is not in the engine."""
    what = "base image" if not plan.flavour.workstation else "slim image of this cell"
    hint = (
        "pull it with --pull, bootstrap one (`imagekit base bootstrap`) or map it "
        "with --base-override"
        if not plan.flavour.workstation
        else "build the slim flavour first (drop --flavour full)"
    )
    message = f"the {what} {reference} is not in the engine; {hint}"
    return message + (f" (pull failed: {pull_failure})" if pull_failure else "")


def budget_problem(size_bytes: int, budget_bytes: int) -> str | None:
    """None when within budget; else both numbers, for the person reading it."""
    if size_bytes <= budget_bytes:
        return None
    return (
        f"over budget: {size_bytes:,} bytes ({size_bytes / 1e9:.2f} GB) > "
        f"{budget_bytes:,} bytes ({budget_bytes / 1e9:.2f} GB)"
    )


def summary(result: BuildRecord) -> str:
    """One line for a finished image: its size, layers and time, or why it failed."""
    if result.ok:
        size = f"{result.size_bytes / 1e9:.2f} GB" if result.size_bytes else "?"
        return f"{result.status} ({size}, {result.layer_count} layers, {result.duration_s:.0f}s)"
    return f"{result.status}: {result.message.splitlines()[0] if result.message else ''}"
