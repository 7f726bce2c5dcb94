"""The use case of `imagekit build`: check the inputs, choose the builder the engine allows,
and build every plan into a new run folder (`build_run.BuildRun`), over the ports the CLI
hands in (`BuildTools`); never prints.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from imagekit.build.context import ContextInputs
from imagekit.build.features import buildkit_refusal
from imagekit.build.options import (
    BuilderChoice,
    BuilderPick,
    builder_refusal,
    guess_buildx,
    pick_builder,
)
from imagekit.build.ports import Builder
from imagekit.build.render import RenderOptions
from imagekit.build.requests import BuildSettings
from imagekit.build.run import BuildContexts, BuildRun
from imagekit.build.security import SecuritySource
from imagekit.errors import EngineUnavailableError
from imagekit.events import EventSink
from imagekit.kernel.engine import Engine
from imagekit.kernel.records import BuildRecord
from imagekit.kernel.store import RunStore
from imagekit.matrix.plan import ImagePlan

# BuildRun and what it takes are this use case's parts, named here for its callers too.
__all__ = [
    "BuildContexts",
    "BuildReport",
    "BuildRun",
    "BuildSettings",
    "BuildTools",
    "build_images",
    "choose_builder",
]

# The use case ---------------------------------------------------------------------------------


class BuildTools(Protocol):
    """What `build_images` asks of the world (the CLI hands in Docker's), in the order it asks:
    nothing that needs the engine before the inputs are checked."""

    def render(self, buildkit: bool) -> tuple[RenderOptions, ContextInputs]:
        """The checked render inputs, for a BuildKit build or not (InputError if bad)."""
        ...

    def buildx_version(self) -> str | None:
        """The docker buildx plugin's version (None: it does not answer)."""
        ...

    def buildx_driver(self) -> str:
        """buildx's driver: docker, docker-container, ..."""
        ...

    def check_results(self) -> None:
        """InputError when the results folder cannot be written."""
        ...

    def connect(self) -> Engine:
        """The engine (connected now)."""
        ...

    def builder(self, buildkit: bool) -> Builder:
        """buildx (BuildKit), or the engine's own builder."""
        ...

    def say(self, line: str) -> None:
        """Tell people, before anything else, which builder builds and why."""
        ...

    def tidy(self) -> None:
        """Remove what ended runs left on the engine; note what other runs have there."""
        ...

    def open_run(self) -> RunStore:
        """A new run folder, its run.json written."""
        ...

    def view(self) -> AbstractContextManager[EventSink]:
        """Where the run's events go while it builds."""
        ...

    def security(self) -> SecuritySource:
        """Where the security step reads the distribution's security suites."""
        ...


@dataclass(frozen=True)
class BuildReport:
    """What a build run did: its run folder and one record per image, in plan order."""

    run_id: str
    root: Path
    results: list[BuildRecord] = field(default_factory=list)

    @property
    def failed(self) -> list[BuildRecord]:
        """The images that failed or were skipped."""
        return [r for r in self.results if not r.ok]


def choose_builder(
    settings: BuildSettings, tools: BuildTools, plugin: str | None
) -> tuple[Engine, BuilderPick]:
    """The engine, and the builder that builds on it (`plugin`: buildx's version, None where it
    does not answer): the choice the engine allows, with the BuildKit options it can do.
    EngineUnavailableError (with a hint) where it cannot."""
    engine = tools.connect()
    facts = engine.info()
    buildkit = settings.buildkit
    refusal = builder_refusal(
        settings.builder, has_buildkit=facts.has_buildkit, plugin=plugin, engine=facts.describe()
    )
    pick = pick_builder(settings.builder, plugin=plugin, engine=facts)
    wants = buildkit.wants
    refusal = refusal or buildkit_refusal(
        wants,
        cache_to=bool(buildkit.cache_to),
        compression=bool(buildkit.compression),
        use_buildx=pick.buildx,
        driver=tools.buildx_driver() if pick.buildx and wants else "",  # asked only if it matters
        image_store=facts.image_store,
        engine=facts.describe(),
    )
    if refusal is not None:
        raise EngineUnavailableError(refusal.message, refusal.hint)
    return engine, pick


def build_images(plans: list[ImagePlan], settings: BuildSettings, tools: BuildTools) -> BuildReport:
    """`imagekit build`: check the inputs, pick the builder the engine allows (said first, and
    kept in every image's record), and build every plan into a new run folder, as `settings`
    (the request's, as they are) say."""
    plugin = tools.buildx_version() if settings.builder is not BuilderChoice.SDK else None
    # Bad inputs are reported before the engine is asked anything (checked again below if the
    # engine rules BuildKit out).
    guess = guess_buildx(settings.builder, plugin)
    options, inputs = tools.render(guess)
    tools.check_results()
    engine, pick = choose_builder(settings, tools, plugin)
    if pick.buildx != guess:
        options, inputs = tools.render(pick.buildx)
    tools.say(pick.line)
    tools.tidy()
    run = tools.open_run()
    contexts = BuildContexts(options, inputs)
    builder = tools.builder(pick.buildx)
    with tools.view() as view:
        security = tools.security()
        build = BuildRun(engine, builder, plans, settings, contexts, run, view, pick, security)
        results = build.execute()
    return BuildReport(run.run_id, run.root, results)
