"""bake_contexts: each selected image rendered for BuildKit, its context handed to the writer
(in memory here, `ContextFolder` in the CLI), and the bake file pointing at those folders."""

from __future__ import annotations

from pathlib import Path

from imagekit.build.bake import target_name
from imagekit.build.bake_run import bake_contexts
from imagekit.build.context import PLAN_FILE, ContextInputs, context_files
from imagekit.build.render import RenderOptions, render_image
from imagekit.matrix.load import load_matrix
from tests.fakes import FakeContexts

ROOT = Path(__file__).resolve().parents[3]


def test_each_image_is_written_once_and_its_target_builds_that_folder(tmp_path: Path) -> None:
    plans = load_matrix(ROOT / "examples" / "cpu.yaml").plans
    options = RenderOptions(buildkit=True)
    uv = tmp_path / "uv"
    uv.write_bytes(b"uv")
    inputs = ContextInputs(installer=uv)
    contexts = FakeContexts(tmp_path / "contexts")

    bake = bake_contexts(plans, options, inputs, contexts)

    assert sorted(contexts.written) == sorted(p.name for p in plans)
    for plan in plans:
        # What a single image's context holds, its input hash included: the same files.
        assert contexts.written[plan.name] == context_files(render_image(plan, options), inputs)
        assert PLAN_FILE in contexts.written[plan.name]
        target = bake["target"][target_name(plan)]
        assert target["context"] == str(tmp_path / "contexts" / plan.name)
