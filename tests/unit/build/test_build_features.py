"""Which builder can do the BuildKit-only options of `imagekit build`, per driver and store."""

from __future__ import annotations

import pytest

from imagekit.build.features import buildkit_refusal
from imagekit.kernel.vocabulary import ImageStore

ENGINE = "Docker 26.1.5"


def refusal(wants: list[str], **facts: object) -> str | None:
    settings = {
        "cache_to": "--cache-to" in wants,
        "compression": any(w.startswith("--compression") for w in wants),
        "use_buildx": True,
        "driver": "docker",
        "image_store": "containerd",
        "engine": ENGINE,
    } | facts
    settings["image_store"] = ImageStore(settings["image_store"])
    found = buildkit_refusal(wants, **settings)  # type: ignore[arg-type]
    return None if found is None else f"{found.message} / {found.hint}"


def test_nothing_asked_nothing_refused_even_without_buildkit() -> None:
    assert refusal([], use_buildx=False, image_store="classic") is None


def test_every_option_works_with_the_docker_driver_on_the_containerd_store() -> None:
    assert refusal(["--cache-from", "--cache-to", "--compression zstd"]) is None


def test_the_legacy_builder_is_refused_naming_the_options() -> None:
    said = refusal(["--cache-from", "--compression zstd"], use_buildx=False)
    assert said is not None
    assert said.startswith("--cache-from and --compression zstd need BuildKit")


@pytest.mark.parametrize(
    ("wants", "facts", "refused"),
    [
        # The docker driver exports no cache from the classic store; importing works.
        (["--cache-to"], {"image_store": "classic"}, "exports no build cache"),
        (["--cache-from"], {"image_store": "classic"}, None),
        # A docker-container builder exports a cache whatever the store.
        (["--cache-to"], {"image_store": "classic", "driver": "docker-container"}, None),
        # Forced compression must land in a store that keeps it.
        (["--compression zstd"], {"image_store": "classic"}, "would recompress"),
        (["--compression zstd"], {"driver": "docker-container"}, "would recompress"),
    ],
)
def test_what_each_driver_and_store_can_do(
    wants: list[str], facts: dict[str, str], refused: str | None
) -> None:
    said = refusal(wants, **facts)
    if refused is None:
        assert said is None
    else:
        assert said is not None and refused in said and "containerd-snapshotter" in said
