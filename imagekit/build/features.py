"""Which builder can do what `imagekit build` is asked: decided before anything is built.

BuildKit's registry cache and forced layer compression depend on the builder and the store:
- the legacy builder (the SDK, Podman) has neither;
- buildx's `docker` driver exports a build cache only from the containerd image store;
- forced compression must land in an image store that keeps layers as built: the containerd
  store through the `docker` driver (the classic store, or `--load` from another driver,
  unpacks and recompresses them at push).
"""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.kernel.vocabulary import ImageStore

# buildx's driver that builds into the engine's own image store (its others: docker-container,
# kubernetes, remote).
DOCKER_DRIVER = "docker"
CONTAINERD_HINT = (
    'switch the engine to the containerd image store ("features": {"containerd-snapshotter": '
    "true} in /etc/docker/daemon.json; `make engine` does)"
)


@dataclass(frozen=True)
class Refusal:
    """Why a build cannot start, and what to do."""

    message: str
    hint: str


def buildkit_refusal(
    wants: list[str],
    *,
    cache_to: bool,
    compression: bool,
    use_buildx: bool,
    driver: str,
    image_store: ImageStore,
    engine: str,
) -> Refusal | None:
    """None when the chosen builder can do every option in `wants` on this engine.

    `wants` names the BuildKit-only options asked for; `driver` is buildx's driver ("docker",
    "docker-container", ...) and `image_store` the engine's ("containerd", "classic", ...).
    """
    if not wants:
        return None
    if not use_buildx:
        return Refusal(
            f"{' and '.join(wants)} need BuildKit, and {engine} builds without it here",
            "install the buildx plugin (`make engine`) and use --builder buildx",
        )
    if cache_to and driver == DOCKER_DRIVER and image_store != ImageStore.CONTAINERD:
        return Refusal(
            f"--cache-to: buildx's docker driver exports no build cache from the {image_store} "
            f"store of {engine}",
            f"{CONTAINERD_HINT}, or use a docker-container builder "
            "(`docker buildx create --use --driver docker-container`)",
        )
    if compression and (driver != DOCKER_DRIVER or image_store != ImageStore.CONTAINERD):
        return Refusal(
            f"--compression needs buildx's docker driver on the containerd image store, where "
            f"layers stay as built; here the driver is {driver} and {engine} uses the "
            f"{image_store} store, which would recompress them",
            f"{CONTAINERD_HINT} and use the default builder (`docker buildx use default`), or "
            "leave --compression out",
        )
    return None
