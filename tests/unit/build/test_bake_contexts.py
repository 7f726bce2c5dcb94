"""bake_contexts: each selected image rendered for BuildKit, its context handed to the writer
(in memory here, `ContextFolder` in the CLI), and the bake file pointing at those folders."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from imagekit.build.bake import BakeFile, target_name
from imagekit.build.bake_run import Baked, bake_contexts
from imagekit.build.context import PLAN_FILE, ContextInputs, context_files
from imagekit.build.render import RenderOptions, base_image, render_image
from imagekit.build.reproducible import SOURCE_DATE_EPOCH
from imagekit.kernel import labels as L
from imagekit.matrix.load import load_matrix
from imagekit.matrix.plan import ImagePlan
from tests.fakes import FakeContexts, FakeEngine

ROOT = Path(__file__).resolve().parents[3]


def test_each_image_is_written_once_and_its_target_builds_that_folder(tmp_path: Path) -> None:
    plans = list(load_matrix(ROOT / "examples" / "cpu.yaml").plans)
    options = RenderOptions(buildkit=True)
    uv = tmp_path / "uv"
    uv.write_bytes(b"uv")
    inputs = ContextInputs(installer=uv)
    contexts = FakeContexts(tmp_path / "contexts")

    bake = bake_contexts(plans, options, inputs, contexts).file

    assert sorted(contexts.written) == sorted(p.name for p in plans)
    for plan in plans:
        # What a single image's context holds, its input hash included: the same files.
        assert contexts.written[plan.name] == context_files(render_image(plan, options), inputs)
        assert PLAN_FILE in contexts.written[plan.name]
        target = bake["target"][target_name(plan)]
        assert target["context"] == str(tmp_path / "contexts" / plan.name)


def _baked(
    tmp_path: Path, epoch: int | None, bases: FakeEngine | None
) -> tuple[list[ImagePlan], RenderOptions, Baked]:
    plans = list(load_matrix(ROOT / "examples" / "cpu.yaml").plans)
    options = RenderOptions(buildkit=True)
    uv = tmp_path / "uv"
    uv.write_bytes(b"uv")
    inputs = ContextInputs(installer=uv)
    baked = bake_contexts(plans, options, inputs, FakeContexts(tmp_path), epoch, bases)
    return plans, options, baked


def stamps(bake: BakeFile, plans: list[ImagePlan]) -> dict[str, tuple[str | None, str | None]]:
    """Each image's (SOURCE_DATE_EPOCH build arg, epoch label) in the bake file."""
    targets = [bake["target"][target_name(p)] for p in plans]
    return {
        p.name: (t["args"].get(SOURCE_DATE_EPOCH), t["labels"].get(L.SOURCE_DATE_EPOCH))
        for p, t in zip(plans, targets, strict=True)
    }


def test_the_callers_epoch_stamps_every_image_without_asking_the_engine(tmp_path: Path) -> None:
    engine = FakeEngine()
    plans, _, baked = _baked(tmp_path, 1700000000, engine)
    assert set(stamps(baked.file, plans).values()) == {("1700000000", "1700000000")}
    assert baked.unstamped == ()
    assert engine.pulls == [] and not engine.images  # nothing was looked up or pulled


def test_without_one_each_image_takes_its_bases_epoch_as_imagekit_build_does(
    tmp_path: Path,
) -> None:
    """The base's label where it has one, else its creation time: slim and full alike, since a
    full's epoch is its slim's."""
    plans = list(load_matrix(ROOT / "examples" / "cpu.yaml").plans)
    base = base_image(plans[0], RenderOptions(buildkit=True))
    labelled = FakeEngine()
    labelled.add(base, "sha256:" + "b" * 64, {L.SOURCE_DATE_EPOCH: "1650000000"})
    plans, _, baked = _baked(tmp_path, None, labelled)
    assert set(stamps(baked.file, plans).values()) == {("1650000000", "1650000000")}

    created = FakeEngine()
    added = created.add(base, "sha256:" + "b" * 64)  # no label
    created.images[base] = replace(added, created="2025-11-30T00:00:00.123456789Z")
    plans, _, baked = _baked(tmp_path, None, created)
    assert set(stamps(baked.file, plans).values()) == {("1764460800", "1764460800")}
    assert baked.unstamped == ()


def test_a_base_the_engine_lacks_leaves_its_images_unstamped_and_named(tmp_path: Path) -> None:
    for bases in (FakeEngine(), None):  # an engine without the base; no engine answering
        plans, options, baked = _baked(tmp_path, None, bases)
        assert set(stamps(baked.file, plans).values()) == {(None, None)}
        assert baked.unstamped == (base_image(plans[0], options),)
        warning, wrote = baked.lines(tmp_path / "bake.json")
        assert base_image(plans[0], options) in warning and "set SOURCE_DATE_EPOCH" in warning
        assert wrote.startswith(f"wrote {tmp_path / 'bake.json'}: {len(plans)} targets")
