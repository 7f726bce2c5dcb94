"""`build_images`'s world made of Docker: the engine, buildx, the results folder (the CLI hands
in the terminal's parts: what to say about leftovers, and the progress view)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported lazily: the adapters load docker
    from imagekit.adapters.engine import DockerEngine
    from imagekit.build.context import ContextInputs
    from imagekit.build.inputs import RenderInputs
    from imagekit.build.ports import Builder
    from imagekit.build.render import RenderOptions
    from imagekit.build.security import SecuritySource
    from imagekit.events import EventSink
    from imagekit.kernel.engine import Engine
    from imagekit.kernel.store import RunStore
    from imagekit.matrix.plan import ImagePlan


class DockerBuildTools:
    """`build_images`'s world for one build (`BuildTools` says what each method does):
    Docker, buildx, the results folder, the terminal. An adapter's function is looked up in
    its module when it is called, so that tests can replace it by name."""

    def __init__(
        self,
        plans: list[ImagePlan],
        inputs: RenderInputs,
        results: Path,
        matrix: Path,
        tidy: Callable[[DockerEngine], None],
        view: Callable[[], AbstractContextManager[EventSink]],
        say: Callable[[str], None],
    ) -> None:
        """`plans` rendered with `inputs`, the run folder made under `results` (its run.json
        naming `matrix`); `tidy(engine)`: remove what ended runs left and note the rest;
        `view()`: where the events go; `say(line)`: a line for people (the three belong to the
        terminal, so the caller gives them)."""
        from imagekit.adapters import builders, engine, installer
        from imagekit.adapters import results as run_folders

        self.plans, self.inputs, self.results_dir, self.matrix = plans, inputs, results, matrix
        self.tidy_up, self.make_view, self.said = tidy, view, say
        self.builders, self.docker, self.results = builders, engine, run_folders
        self.installer = installer
        self.engine: DockerEngine | None = None

    def render(self, buildkit: bool) -> tuple[RenderOptions, ContextInputs]:
        return self.installer.rendering(self.inputs, self.plans, buildkit=buildkit)

    def buildx_version(self) -> str | None:
        return self.builders.buildx_version()

    def buildx_driver(self) -> str:
        return self.builders.buildx_driver()

    def check_results(self) -> None:
        self.results.RunFolder.check_writable(self.results_dir)

    def connect(self) -> Engine:
        self.engine = self.docker.open_engine()
        return self.engine

    def builder(self, buildkit: bool) -> Builder:
        assert self.engine is not None
        if buildkit:
            return self.builders.BuildxBuilder()
        return self.builders.SdkBuilder(self.engine)

    def say(self, line: str) -> None:
        self.said(line)

    def tidy(self) -> None:
        assert self.engine is not None
        self.tidy_up(self.engine)

    def open_run(self) -> RunStore:
        assert self.engine is not None
        facts = self.results.RunFacts(matrix=str(self.matrix))
        return self.results.RunFolder.begin(self.results_dir, "build", self.engine.info(), facts)

    def view(self) -> AbstractContextManager[EventSink]:
        return self.make_view()

    def security(self) -> SecuritySource:
        """The suites the matrix's `security:` section names, as the audit reads them."""
        from imagekit.adapters.auditing import security_reader
        from imagekit.build.security import SecuritySource
        from imagekit.matrix.load import load_matrix

        return SecuritySource(*security_reader(load_matrix(self.matrix)))
