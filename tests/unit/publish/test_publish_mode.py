"""What `imagekit publish` makes of its options: the request's settings (its mode decided once),
what each option then changes in a publish over the fakes, and the exit a publish ends with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagekit.errors import EngineError, ExitCode, InputError, PublishError
from imagekit.kernel.publish_records import PublishRecord, PublishStatus, TagRecord
from imagekit.matrix.load import load_matrix
from imagekit.matrix.plan import ImagePlan
from imagekit.matrix.selection import Selection
from imagekit.publish.decisions import (
    PublishMode,
    candidate_tag,
    candidate_tags,
    final_tags,
    platform_tags,
    publish_failure,
    publish_rows,
    publish_table,
)
from imagekit.publish.multiarch import ImageGroup, image_groups
from imagekit.publish.requests import PublishCommand, PublishSettings
from imagekit.publish.run import publish_images
from tests.unit.publish.test_publish_run import World, _candidate, verified

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def slim() -> ImagePlan:
    return next(p for p in load_matrix(ROOT / "examples" / "cpu.yaml").plans if p.flavour == "slim")


# The request's settings --------------------------------------------------------------------


def test_no_candidate_option_pushes_the_final_tags() -> None:
    assert (PublishSettings().mode, PublishSettings().candidate_id) == (PublishMode.PUSH, "")


def test_candidate_pushes_a_candidate_and_from_candidate_promotes_one() -> None:
    pushed = PublishSettings(candidate="ci-1")
    assert (pushed.mode, pushed.candidate_id) == (PublishMode.CANDIDATE, "ci-1")
    promotion = PublishSettings(from_candidate="ci-2")
    assert (promotion.mode, promotion.candidate_id) == (PublishMode.PROMOTION, "ci-2")


def test_both_candidate_options_are_refused_before_any_settings() -> None:
    with pytest.raises(InputError, match="pick one"):
        PublishSettings(candidate="a", from_candidate="b")


def test_a_dry_run_signs_nothing_whatever_the_key() -> None:
    def signing(dry_run: bool = False, key: str | None = "k.key") -> str | None:
        command = PublishCommand(Selection(), PublishSettings(dry_run=dry_run), signing_key=key)
        return command.signing

    assert signing() == "k.key"
    assert signing(dry_run=True) is None
    assert signing(key=None) is None


def test_only_a_promotion_works_without_an_engine() -> None:
    assert [m for m in PublishMode if not m.needs_engine] == [PublishMode.PROMOTION]


def test_only_candidates_may_select_one_platform_of_a_multi_platform_image() -> None:
    matrix = load_matrix(ROOT / "examples" / "cuda-local.yaml")
    amd64 = [p for p in matrix.plans if p.platform == "linux/amd64"]
    for chosen in (PublishSettings(), PublishSettings(from_candidate="9")):
        with pytest.raises(InputError, match="is one index of"):
            image_groups(amd64, matrix.plans, partial=chosen.mode.partial)
    partial = PublishSettings(candidate="9").mode.partial
    groups = image_groups(amd64, matrix.plans, partial=partial)
    assert all(g.multi and len(g.plans) == 1 for g in groups)


def test_the_tags_of_each_mode(slim: ImagePlan) -> None:
    assert final_tags(slim) == [(slim.tag, "versioned"), *((a, "alias") for a in slim.aliases)]
    assert platform_tags(slim) == [(f"{slim.tag}-amd64", "versioned")]
    assert candidate_tags(slim, "7", multi=False) == [(candidate_tag(slim.tag, "7"), "candidate")]
    assert candidate_tags(slim, "7", multi=True) == [(f"{slim.tag}-candidate-7-amd64", "candidate")]


def test_a_settings_registry_retargets_the_repository(slim: ImagePlan) -> None:
    moved = PublishSettings(registry="localhost:5000").repository(slim)
    assert moved.startswith("localhost:5000/") and moved != slim.repository
    assert PublishSettings().repository(slim) == slim.repository


# What each option changes in a publish -----------------------------------------------------


def run(world: World, options: dict[str, Any], engine: bool = True) -> PublishRecord:
    chosen = PublishSettings(**options)
    ports = world.ports([verified(world.image, world.plan)])
    groups = [ImageGroup((world.plan,), 1)]
    return publish_images(chosen, groups, ports, world.engine if engine else None).records[0]


def test_each_option_changes_what_a_publish_does(tmp_path: Path, slim: ImagePlan) -> None:
    pushed = World(tmp_path / "push", slim)
    record = run(pushed, {})
    assert pushed.registry.pushed == [f"{slim.repository}:{t}" for t, _ in final_tags(slim)]
    assert record.status is PublishStatus.PUBLISHED

    dry = World(tmp_path / "dry", slim)
    assert run(dry, {"dry_run": True}).status is PublishStatus.DRY_RUN
    assert dry.registry.pushed == []

    elsewhere = World(tmp_path / "elsewhere", slim)
    run(elsewhere, {"registry": "localhost:5000"})
    assert elsewhere.registry.pushed
    assert all(t.startswith("localhost:5000/") for t in elsewhere.registry.pushed)

    candidate = World(tmp_path / "candidate", slim)
    run(candidate, {"candidate": "7"})
    assert candidate.registry.pushed == [f"{slim.repository}:{candidate_tag(slim.tag, '7')}"]

    promoted = World(tmp_path / "promoted", slim)
    _candidate(promoted, "7")
    assert run(promoted, {"from_candidate": "7"}, engine=False).status is PublishStatus.PUBLISHED
    assert promoted.registry.pushed == [] and promoted.engine.tagged == []
    assert promoted.registry.put_tags == [f"{slim.repository}:{t}" for t, _ in final_tags(slim)]

    # A dry run of a promotion gates the candidate and lists the tags, and puts none.
    rehearsed = World(tmp_path / "rehearsed", slim)
    _candidate(rehearsed, "7")
    record = run(rehearsed, {"from_candidate": "7", "dry_run": True}, engine=False)
    assert record.status is PublishStatus.DRY_RUN
    assert rehearsed.registry.put_tags == [] and rehearsed.registry.pushed == []
    listed = [(t.tag, t.status) for t in record.tags]
    assert listed == [
        (f"{slim.repository}:{t}", PublishStatus.DRY_RUN) for t, _ in final_tags(slim)
    ]


def test_force_publishes_an_image_no_record_passed_and_says_so(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)
    chosen = PublishSettings(force=True)
    groups = [ImageGroup((slim,), 1)]
    record = publish_images(chosen, groups, world.ports([]), world.engine).records[0]
    assert record.status is PublishStatus.PUBLISHED and record.forced and record.reasons
    refused = publish_images(PublishSettings(), groups, world.ports([]), world.engine)
    assert refused.records[0].status is PublishStatus.REFUSED


def test_pushing_a_local_image_needs_an_engine(tmp_path: Path, slim: ImagePlan) -> None:
    world = World(tmp_path, slim)
    for chosen in (PublishSettings(), PublishSettings(candidate="7")):
        with pytest.raises(ValueError, match="needs an engine"):
            publish_images(chosen, [ImageGroup((slim,), 1)], world.ports([]), None)


def test_an_engine_refusal_reaches_the_outcome_and_its_exit(
    tmp_path: Path, slim: ImagePlan
) -> None:
    world = World(tmp_path, slim)

    def tag(image: str, repository: str, name: str) -> None:
        raise EngineError("the engine refused while tagging: no space left", "free some space")

    world.engine.tag = tag  # type: ignore[method-assign]
    chosen = PublishSettings()
    ports = world.ports([verified(world.image, slim)])
    outcome = publish_images(chosen, [ImageGroup((slim,), 1)], ports, world.engine)
    error = outcome.failure()
    assert isinstance(error, EngineError) and error.exit_code is ExitCode.ENGINE_UNAVAILABLE
    assert error.message == (
        "1 of 1 images not published; the engine refused 1: "
        "the engine refused while tagging: no space left"
    )
    assert error.hint == "free some space"


# The exit a publish ends with --------------------------------------------------------------


def record(name: str, status: PublishStatus, **fields: Any) -> PublishRecord:
    return PublishRecord(name=name, status=status, **fields)


def test_every_image_published_ends_well() -> None:
    done = [record("a", PublishStatus.PUBLISHED), record("b", PublishStatus.DRY_RUN)]
    assert publish_failure(done, []) is None


def test_a_refused_image_asks_to_verify_first() -> None:
    done = [record("a", PublishStatus.PUBLISHED), record("b", PublishStatus.REFUSED)]
    error = publish_failure(done, [])
    assert isinstance(error, PublishError) and error.exit_code is ExitCode.PUBLISH_FAILED
    assert error.message == "1 of 2 images not published: b: refused"
    assert error.hint == "verify them first (imagekit verify); the reasons are above"


def test_a_failed_image_points_at_the_registrys_reasons() -> None:
    error = publish_failure([record("a", PublishStatus.FAILED)], [])
    assert isinstance(error, PublishError)
    assert error.message == "1 of 1 images not published: a: failed"
    assert error.hint == "the registry's reasons are above"


def test_the_table_names_each_tag_by_its_tag_and_a_forced_image() -> None:
    tags = (
        TagRecord(tag="r/x:1.0", kind="versioned", status=PublishStatus.PUBLISHED),
        TagRecord(tag="localhost:5000/x:latest", kind="alias", status=PublishStatus.UNCHANGED),
    )
    forced = record("a", PublishStatus.PUBLISHED, forced=True, tags=tags, reasons=("x", "y"))
    assert publish_rows([forced]) == [
        ["a", "published (forced)", "1.0=published, latest=unchanged", "x; y"]
    ]
    assert publish_table([forced]).split("\n")[0].split() == ["IMAGE", "STATUS", "TAGS", "REASONS"]
