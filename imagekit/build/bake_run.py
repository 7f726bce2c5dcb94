"""The use case of `imagekit bake`: render each plan for BuildKit and write its context, for
the bake file that builds them all (`docker buildx bake -f FILE`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagekit.build.bake import BakeFile, bake_file
from imagekit.build.context import ContextInputs, rendered_contexts
from imagekit.build.ports import ContextWriter, ImageLookup
from imagekit.build.render import RenderOptions, base_image
from imagekit.build.reproducible import parent_epoch
from imagekit.kernel.engine import LocalImage
from imagekit.matrix.plan import ImagePlan


@dataclass(frozen=True)
class Baked:
    """The bake file, and the bases no epoch could be read from (their images' times are the
    builder's clock: not reproducible)."""

    file: BakeFile
    unstamped: tuple[str, ...] = ()

    def lines(self, out: Path) -> list[str]:
        """What the user is told: the images that are not reproducible and the remedy, then
        where the file is and how to build it."""
        return [
            *(
                f"warning: no SOURCE_DATE_EPOCH for the images on {base}: it is not in the local"
                " engine, so their times will be the builder's clock and a rebuild another"
                " image; set SOURCE_DATE_EPOCH, or load the base here, for reproducible builds"
                for base in self.unstamped
            ),
            f"wrote {out}: {len(self.file['target'])} targets;"
            f" build with `docker buildx bake -f {out}`",
        ]


def bake_contexts(
    plans: list[ImagePlan],
    options: RenderOptions,
    inputs: ContextInputs,
    contexts: ContextWriter,
    epoch: int | None = None,
    bases: ImageLookup | None = None,
) -> Baked:
    """Write each plan's build context to `contexts`; the bake file that builds them.

    Each image gets the epoch `imagekit build` would give it: `epoch` (the caller's
    SOURCE_DATE_EPOCH), else its base's in `bases` (the local engine; a full's is its slim's,
    which is the base's)."""
    images, epochs, unstamped = [], {}, []
    found: dict[str, LocalImage | None] = {}  # each base looked up once
    for rendered, files in rendered_contexts(plans, options, inputs):
        plan = rendered.plan
        folder = contexts.write_context(plan.name, files)
        images.append((rendered, folder.resolve()))
        base = base_image(plan, options)
        if epoch is None and bases is not None and base not in found:
            found[base] = bases.inspect_image(base)
        stamped = parent_epoch(epoch, found.get(base))
        if stamped is not None:
            epochs[plan.name] = stamped
        elif base not in unstamped:
            unstamped.append(base)
    ca = inputs.ca_bundle.resolve() if inputs.ca_bundle else None
    return Baked(bake_file(images, ca, epochs), tuple(unstamped))
