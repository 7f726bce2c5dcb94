"""Orchestration of `imagekit bake`: render each plan for BuildKit and write its context, for
the bake file that builds them all (`docker buildx bake -f FILE`)."""

from __future__ import annotations

from pathlib import Path

from imagekit.build.bake import BakeFile, bake_file
from imagekit.build.context import ContextInputs, write_context
from imagekit.build.render import RenderOptions, render_image
from imagekit.matrix.plan import ImagePlan


def bake_contexts(
    plans: list[ImagePlan], options: RenderOptions, inputs: ContextInputs, contexts: Path
) -> BakeFile:
    """Write each plan's build context under `contexts`; the bake file that builds them."""
    images = []
    for plan in plans:
        rendered = render_image(plan, options)
        folder = write_context(rendered, contexts.resolve(), inputs)
        images.append((rendered, folder.resolve()))
    return bake_file(images, inputs.ca_bundle.resolve() if inputs.ca_bundle else None)
