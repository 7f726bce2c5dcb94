"""The use case of `imagekit bake`: render each plan for BuildKit and write its context, for
the bake file that builds them all (`docker buildx bake -f FILE`)."""

from __future__ import annotations

from imagekit.build.bake import BakeFile, bake_file
from imagekit.build.context import ContextInputs, rendered_contexts
from imagekit.build.ports import ContextWriter
from imagekit.build.render import RenderOptions
from imagekit.matrix.plan import ImagePlan


def bake_contexts(
    plans: list[ImagePlan], options: RenderOptions, inputs: ContextInputs, contexts: ContextWriter
) -> BakeFile:
    """Write each plan's build context to `contexts`; the bake file that builds them."""
    images = []
    for rendered, files in rendered_contexts(plans, options, inputs):
        folder = contexts.write_context(rendered.plan.name, files)
        images.append((rendered, folder.resolve()))
    return bake_file(images, inputs.ca_bundle.resolve() if inputs.ca_bundle else None)
