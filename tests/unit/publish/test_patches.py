"""Patch tags: a rebuild of a published image goes under `{tag}-pN` with `publish --patch`, the
aliases move to it, the versioned tag never changes, and a release past its end_of_patch is
patched no more."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from imagekit.kernel.publish_records import PublishRecord, PublishStatus
from imagekit.kernel.vocabulary import TagKind
from imagekit.matrix.load import load_matrix
from imagekit.matrix.plan import ImagePlan
from imagekit.publish.multiarch import ImageGroup
from imagekit.publish.patches import newest_tag, past_end_of_patch, patch_numbers, patch_tag
from imagekit.publish.ports import RemoteManifest
from imagekit.publish.run import publish_images
from tests.fakes import image_id
from tests.unit.publish.test_publish_run import World, _candidate, settings, verified

ROOT = Path(__file__).resolve().parents[3]
OLD = RemoteManifest(image_id("manifest of last month's build"), image_id("last month"))


@pytest.fixture
def slim() -> ImagePlan:
    return next(p for p in load_matrix(ROOT / "examples" / "cpu.yaml").plans if p.flavour == "slim")


def ending(plan: ImagePlan, day: str | None) -> ImagePlan:
    """`plan` of a release whose end_of_patch is `day`."""
    return dataclasses.replace(plan, cell=dataclasses.replace(plan.cell, end_of_patch=day))


def published(world: World, *tags: str, held: RemoteManifest = OLD) -> None:
    """The registry holds `held` under each of `tags` of the world's repository."""
    for tag in tags:
        world.registry.tags[f"{world.repository}:{tag}"] = held


def patch(world: World, plan: ImagePlan, **options: object) -> PublishRecord:
    chosen = settings(patch=True, **options)
    ports = world.ports([verified(world.image, plan)])
    engine = None if chosen.from_candidate else world.engine
    return publish_images(chosen, [ImageGroup((plan,), 1)], ports, engine).records[0]


def test_patch_numbers_are_read_from_the_repositorys_tags() -> None:
    listed = ["1.0-slim", "1.0-slim-p1", "1.0-slim-p10", "1.0-slim-p2", "1.0-slim-px"]
    listed.append("1.0-slim-p0")
    assert patch_numbers("1.0-slim", listed) == [1, 2, 10]
    assert newest_tag("1.0-slim", listed) == "1.0-slim-p10"
    assert newest_tag("1.0-slim", ["1.0-slim"]) == "1.0-slim"
    assert newest_tag("1.0-slim", ["1.0-slim-candidate-7"]) is None
    # Another image's tag that begins with this one's is not its patch.
    assert patch_numbers("1.0", ["1.0-slim-p3"]) == []
    assert patch_tag("1.0-slim", 3) == "1.0-slim-p3"


def test_end_of_patch_is_the_last_day_patched(slim: ImagePlan) -> None:
    last = ending(slim, "2027-06-30")
    assert not past_end_of_patch(last, dt.date(2027, 6, 30))
    assert past_end_of_patch(last, dt.date(2027, 7, 1))
    assert not past_end_of_patch(slim, dt.date(2999, 1, 1))


def test_without_patch_a_rebuild_is_refused_and_told_about_patch(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    published(world, slim.tag)
    record = world.publish([verified(world.image, slim)])
    assert record.status is PublishStatus.REFUSED
    assert "never overwritten: publish a rebuild with --patch" in record.reasons[-1]
    assert world.registry.pushed == []


def test_a_rebuild_goes_under_the_next_patch_tag_and_the_aliases_move_to_it(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    published(world, slim.tag, f"{slim.tag}-p1", *slim.aliases)
    record = patch(world, slim)
    assert record.status is PublishStatus.PUBLISHED, record.reasons
    kinds = [(t.tag.rpartition(":")[2], t.kind, t.status) for t in record.tags]
    assert kinds == [
        (f"{slim.tag}-p2", TagKind.PATCH, PublishStatus.PUBLISHED),
        *((a, TagKind.ALIAS, PublishStatus.PUBLISHED) for a in slim.aliases),
    ]
    assert all(t.moved_from == OLD.digest for t in record.tags if t.kind is TagKind.ALIAS)
    # The versioned tag and the earlier patch still hold what they held.
    assert world.registry.tags[f"{slim.repository}:{slim.tag}"] == OLD
    assert world.registry.tags[f"{slim.repository}:{slim.tag}-p1"] == OLD
    # Published again, the same image is the newest patch already: nothing moves.
    again = patch(world, slim)
    assert again.status is PublishStatus.UNCHANGED, again.reasons
    assert again.tags[0].tag == f"{slim.repository}:{slim.tag}-p2"


def test_patch_changes_nothing_where_the_versioned_tag_is_free_or_holds_the_image(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    record = patch(world, slim)
    assert record.tags[0].kind is TagKind.VERSIONED
    assert record.tags[0].tag == f"{slim.repository}:{slim.tag}"


def test_a_promotion_with_patch_puts_the_candidate_under_the_next_patch_tag(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    published(world, slim.tag, *slim.aliases)
    candidate = _candidate(world, "7")
    record = patch(world, slim, from_candidate="7")
    assert record.status is PublishStatus.PUBLISHED, record.reasons
    assert world.registry.put_tags == [
        f"{slim.repository}:{t}" for t in (f"{slim.tag}-p1", *slim.aliases)
    ]
    assert all(t.digest == candidate.digest for t in record.tags)
    assert world.registry.tags[f"{slim.repository}:{slim.tag}"] == OLD


def test_past_its_end_of_patch_a_release_is_patched_no_more(
    tmp_path: Path, slim: ImagePlan
) -> None:
    ended = ending(slim, "2020-01-31")
    for how in ({}, {"from_candidate": "7"}):
        world = World(tmp_path / str(len(how)), ended)
        published(world, slim.tag, *slim.aliases)
        _candidate(world, "7")
        record = patch(world, ended, **how)
        assert record.status is PublishStatus.REFUSED
        assert "end_of_patch (2020-01-31) has passed" in record.reasons[-1]
        assert world.registry.pushed == [] and world.registry.put_tags == []


def test_a_multi_platform_image_is_patched_through_candidates(tmp_path: Path) -> None:
    matrix = load_matrix(ROOT / "examples" / "cuda-local.yaml")
    first = matrix.plans[0]
    both = tuple(p for p in matrix.plans if p.tag == first.tag)
    assert len(both) == 2
    world = World(tmp_path, first)
    chosen = settings(patch=True)
    done = publish_images(chosen, [ImageGroup(both, 2)], world.ports([]), world.engine).records
    [record] = done
    assert (
        record.status is PublishStatus.REFUSED
        and "--from-candidate ID --patch" in record.reasons[0]
    )
    assert world.registry.pushed == []
