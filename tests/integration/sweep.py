"""The dangling build stages a test run leaves on the engine, and their removal.

The legacy builder keeps an image per step of every stage, and those of a stage other than the
last stay behind untagged (on the containerd store, about 1 GB each). A test session removes
the ones that appeared while it ran. Two sessions side by side on one engine (`make test`,
scripts/run-tests.sh) must not: the sweep at the end of one would take the stages of a build
the other is in the middle of (seen: `COPY --from=full-builder` failing with "No such image").
There the script writes the run down before both start and sweeps once both are done
(tests/integration/runs.py).
"""

from __future__ import annotations

import contextlib
import os

import docker

# Set to 0 by scripts/run-tests.sh for sessions that share the engine with another.
SWEEP_VARIABLE = "IMAGEKIT_TEST_SWEEP"


def session_sweeps() -> bool:
    """Whether a test session sweeps at its end (it runs alone on its engine)."""
    return os.environ.get(SWEEP_VARIABLE, "1") != "0"


def dangling(engine: docker.DockerClient) -> set[str]:
    """The ids of the dangling images on the engine."""
    return {i.id for i in engine.images.list(all=True, filters={"dangling": True})}


def sweep(engine: docker.DockerClient, before: set[str]) -> list[str]:
    """Remove the dangling imagekit images (build stages, untagged images of a cell) not in
    `before`, with the untagged steps under them; what would not go, for a message."""
    left: list[str] = []
    for image in engine.images.list(all=True, filters={"dangling": True}):
        labels = image.labels
        if image.id not in before and (
            labels.get("io.imagekit.stage") or labels.get("io.imagekit.cell")
        ):
            left += remove_with_ancestors(engine, image.id, before)
    return left


def remove_with_ancestors(engine: docker.DockerClient, image_id: str, keep: set[str]) -> list[str]:
    """Remove an untagged image and then each untagged parent not in `keep`; the ids that
    would not go (a parent with other children stays, as it should)."""
    left = []
    while image_id and image_id not in keep:
        try:
            image = engine.images.get(image_id)
        except docker.errors.ImageNotFound:
            break
        if image.tags:
            break
        parent = image.attrs.get("Parent") or ""
        try:
            engine.images.remove(image.id, force=True)
        except docker.errors.APIError as exc:
            if "child" not in str(exc):
                left.append(f"{image.id[7:19]}: {exc.explanation or exc}")
            break
        image_id = parent
    return left


def remove_names(engine: docker.DockerClient, image_id: str, names: list[str]) -> None:
    """Remove an image's `names` one by one, or, given none, the image by its id. An image that
    also carries a name not among them (a base image a test tagged too) keeps it and stays; the
    last name takes the image with it. Untagged parents stay: on the containerd store pruning
    them also drops build steps other images share (the other session's cache, mid-run)."""
    for reference in names or [image_id]:
        with contextlib.suppress(docker.errors.APIError):
            engine.api.remove_image(reference, force=not names, noprune=True)
