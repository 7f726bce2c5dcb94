"""The legacy builder removes the builder stages a build left untagged, unless they are kept as
its layer cache (--keep-stages), and never one a tag or a child still uses
(adapters/builders.py); what `docker buildx version` says is read for its version."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest

from imagekit.adapters.builders import SdkBuilder, plugin_version
from imagekit.build.ports import BuildRequest
from imagekit.kernel import labels as L

STAGE = "594048b51f53"
BUILT = "sha256:" + "a" * 64
STREAM = [
    "Step 1/4 : FROM base AS builder",
    " ---> aab71299ab8c",
    'Step 2/4 : LABEL io.imagekit.stage="builder"',
    f" ---> {STAGE}",
    "Step 3/4 : FROM base AS runtime",
    " ---> aab71299ab8c",
    "Step 4/4 : COPY --from=builder /made /made",
    " ---> a332a240ebfb",
]


class FakeApi:
    """The low-level API of an engine that holds `images` (short id -> inspect answer)."""

    def __init__(self, images: dict[str, dict[str, Any]], in_use: frozenset[str] = frozenset()):
        self.images, self.in_use = images, in_use
        self.removed: list[str] = []

    def build(self, **kwargs: object) -> list[dict[str, Any]]:
        return [{"stream": line + "\n"} for line in STREAM] + [{"aux": {"ID": BUILT}}]

    def inspect_image(self, ref: str) -> dict[str, Any]:
        if ref not in self.images:
            raise docker.errors.NotFound(f"No such image: {ref}")
        return self.images[ref]

    def remove_image(self, image: str, noprune: bool = False) -> None:
        assert not noprune  # its untagged parents go with it
        if image in self.in_use:
            raise docker.errors.APIError("conflict", explanation="image has dependent child images")
        self.removed.append(image)


def image(short_id: str, labels: dict[str, str], tags: list[str] | None = None) -> dict[str, Any]:
    return {
        "Id": f"sha256:{short_id}{'0' * 52}",
        "RepoTags": tags or [],
        "Config": {"Labels": labels},
    }


def builder(api: FakeApi) -> SdkBuilder:
    return SdkBuilder(SimpleNamespace(client=SimpleNamespace(api=api)))  # type: ignore[arg-type]


def request(tmp_path: Path, keep_stages: bool) -> BuildRequest:
    return BuildRequest(
        "slim", tmp_path, "r:1", {}, {}, tmp_path / "log.txt", keep_stages=keep_stages
    )


@pytest.mark.parametrize(("keep_stages", "left"), [(False, []), (True, [STAGE])])
def test_a_legacy_build_removes_its_builder_stage_unless_asked_to_keep_it(
    tmp_path: Path, keep_stages: bool, left: list[str]
) -> None:
    api = FakeApi({STAGE: image(STAGE, {L.STAGE: "builder"})})
    lines: list[str] = []
    outcome = builder(api).build(request(tmp_path, keep_stages), lambda _, line: lines.append(line))
    assert outcome.ok and outcome.image_id == BUILT
    assert [i for i in [STAGE] if api.images[i]["Id"] not in api.removed] == left
    said = [x for x in lines if "builder stage" in x]
    removed = f"imagekit: removed the builder stage {STAGE} (builder); --keep-stages keeps them"
    assert said == ([] if keep_stages else [removed + " as a cache"])
    assert (tmp_path / "log.txt").read_text().count("removed the builder stage") == len(said)


def test_only_an_untagged_image_with_the_stage_label_goes_and_the_engine_keeps_a_parent() -> None:
    tagged, plain, parent = "111111111111", "222222222222", "333333333333"
    api = FakeApi(
        {
            tagged: image(tagged, {L.STAGE: "builder"}, ["someone/kept:it"]),
            plain: image(plain, {L.CELL: "2.13.0-cpu-py3.11"}),
            parent: image(parent, {L.STAGE: "full-builder"}),
        },
        in_use=frozenset({image(parent, {})["Id"]}),
    )
    said = builder(api).remove_stages([tagged, plain, parent, "gone00000000"])
    assert api.removed == []
    (kept,) = said
    assert kept.startswith(f"imagekit: kept the builder stage {parent} (full-builder): ")
    assert "image has dependent child images" in kept


def test_the_plugin_version_is_read_from_what_buildx_says() -> None:
    assert plugin_version("github.com/docker/buildx 0.13.1+ds1 0.13.1+ds1-3\n") == "0.13.1"
    assert plugin_version("github.com/docker/buildx v0.14.1 59582f7\n") == "0.14.1"
    assert plugin_version("") == "?"
