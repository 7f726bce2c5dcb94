"""Building a list of plans: render, skip what is up to date, build, measure, record.

Sequences the pure core (render, input hash, budget) over the ports (engine, builder, run
store) and reports progress as events; never prints. One failing image never stops the
others unless `fail_fast` is set; a `full` image waits for the `slim` image of its cell.
`use_case.build_images` chooses the builder and runs this.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from imagekit.build.context import (
    ContextInputs,
    context_files,
    external_digests,
    input_hash,
    materials,
)
from imagekit.build.options import BuilderPick, BuildNetwork
from imagekit.build.outcome import budget_problem, missing_parent, platform_mismatch, summary
from imagekit.build.ports import Builder, BuildRequest, LineSink
from imagekit.build.render import RenderedImage, RenderOptions, render_image
from imagekit.build.reproducible import SOURCE_DATE_EPOCH, parent_epoch
from imagekit.build.requests import BuildSettings
from imagekit.build.security import SecuritySource, SecuritySteps
from imagekit.build.stream import BuildLog
from imagekit.events import Event, EventKind, EventSink
from imagekit.kernel import labels as L
from imagekit.kernel.engine import Engine, LocalImage
from imagekit.kernel.records import (
    BuildRecord,
    BuildStatus,
    ImageRecord,
    LayerSize,
    Material,
    PlanRecord,
)
from imagekit.kernel.runtime import runs_emulated
from imagekit.kernel.store import RunStore
from imagekit.matrix.plan import ImagePlan

__all__ = ["BuildContexts", "BuildRun", "BuildSettings"]

LARGEST_LAYERS = 5


@dataclass(frozen=True)
class BuildContexts:
    """How each image's build context is made, which no option gives: the render options and
    the files from outside the render, resolved for the builder `build_images` chose. The run
    store places the contexts (`RunStore.write_context`)."""

    options: RenderOptions
    inputs: ContextInputs


@dataclass(frozen=True)
class Measured:
    """What the engine says about a built (or up-to-date) image (None: there is none), and
    what it was built from (its parent's id and the context's external files)."""

    image_id: str | None
    size_bytes: int | None = None
    layer_count: int | None = None
    largest_layers: tuple[LayerSize, ...] = ()
    parent_id: str | None = None
    materials: tuple[Material, ...] = ()


@dataclass(frozen=True)
class Start:
    """When an image's build began (`time.monotonic()`), and the run's builder and why."""

    at_s: float
    builder: BuilderPick | None


def _step_reporter(events: EventSink, name: str, lines: list[str]) -> LineSink:
    """A line sink that keeps every line of the build's log in `lines` (the views fold it:
    GitHub Actions `::group::`) and reports each new step."""
    # Keyed by the step number too: two steps in a row with the same instruction
    # (`RUN true` twice) are still two steps.
    last: dict[str, tuple[int, str]] = {"step": (0, "")}

    def on_line(log: BuildLog, line: str) -> None:
        lines.append(line)
        if log.step and (log.step_index, log.step) != last["step"]:
            last["step"] = (log.step_index, log.step)
            step = f"step {log.step_index}/{log.step_count}: {log.step}"
            events(Event(EventKind.STEP, name, step))

    return on_line


class BuildRun:
    """One `imagekit build` over a list of plans."""

    def __init__(
        self,
        engine: Engine,
        builder: Builder,
        plans: list[ImagePlan],
        settings: BuildSettings,
        contexts: BuildContexts,
        run: RunStore,
        events: EventSink,
        chosen: BuilderPick | None = None,
        security: SecuritySource | None = None,
    ) -> None:
        """`chosen`: the builder and why, kept in every image's record; `security`: where the
        security step of a base imagekit did not bootstrap reads its suite (None, or an offline
        build, --network none: no step; the audit says what such an image lacks)."""
        self.engine = engine
        self.builder = builder
        self.plans = plans
        self.settings = settings
        self.contexts = contexts
        self.run = run
        self.events = events
        self.chosen = chosen
        self.results: dict[str, BuildRecord] = {}
        self.host_arch = engine.info().architecture
        offline = settings.network is BuildNetwork.NONE
        self.security = SecuritySteps(engine, None if offline else security)

    def _platform(self, plan: ImagePlan) -> str | None:
        """The platform to ask the builder (and a pull) for: none for the engine's own, so a
        native build is the same request as ever (engines differ in what they do with it);
        the plan's for any other, or where the engine did not say what it runs on."""
        native = self.host_arch is not None and not runs_emulated(plan.platform, self.host_arch)
        return None if native else plan.platform

    # One image ------------------------------------------------------------------

    def build_one(self, plan: ImagePlan) -> BuildRecord:
        """Render, check for an up-to-date image, build, measure and record one plan."""
        log_lines: list[str] = []  # what the builder wrote to the image's log
        result = self._build_one(plan, log_lines)
        self.run.update_image(plan.name, _image_record(plan, result))
        status, logged = result.status.value, tuple(log_lines)
        self.events(Event(EventKind.FINISHED, plan.name, summary(result), status, logged))
        return result

    def _build_one(self, plan: ImagePlan, log_lines: list[str] | None = None) -> BuildRecord:
        s, made = self.settings, self.contexts
        started = Start(time.monotonic(), self.chosen)
        rendered = render_image(plan, made.options)
        parent = self._parent(plan, rendered)
        if isinstance(parent, str):
            return _record(plan, started, BuildStatus.FAILED, parent)
        epoch = parent_epoch(s.source_date_epoch, parent)
        engine_inputs = {"parent_image_id": parent.id}
        if (step := self.security.step(plan, parent)) is not None:
            rendered = render_image(plan, made.options, step)
            engine_inputs["security_suite"] = step.engine_input
        if epoch is not None:
            # Another epoch is another image (its times); unnamed where there is none.
            engine_inputs["source_date_epoch"] = str(epoch)
        if s.compression:
            # Other layers, other image: an image is not up to date for a build that forces
            # another compression. (Only named when forced, so existing hashes stay.)
            engine_inputs["layer_compression"] = s.compression.value
        files = external_digests(made.inputs)  # each external file read once per build
        digest = input_hash(rendered, made.inputs, engine_inputs, files)
        used = (parent.id, materials(rendered, files))
        existing = self.engine.inspect_image(plan.reference)
        if existing is not None and not s.no_cache and existing.labels.get(L.INPUT_HASH) == digest:
            measured = self._measure(existing.id, *used)
            return _record(plan, started, BuildStatus.UP_TO_DATE, "up to date", digest, measured)
        self.events(Event(EventKind.STARTED, plan.name, f"building with {self.builder.name}"))
        request = self._request(plan, rendered, digest, epoch)
        on_line = _step_reporter(self.events, plan.name, [] if log_lines is None else log_lines)
        outcome = self.builder.build(request, on_line)
        log_path = str(request.log_path)
        if not outcome.ok or outcome.image_id is None:
            return _record(
                plan, started, BuildStatus.FAILED, outcome.message, digest, None, log_path
            )
        measured = self._measure(outcome.image_id, *used)
        return _record(plan, started, BuildStatus.BUILT, "built", digest, measured, log_path)

    def _parent(self, plan: ImagePlan, rendered: RenderedImage) -> LocalImage | str:
        """The image the build starts FROM (pulled where allowed), or why there is none to
        build `plan` on."""
        reference = rendered.build_args.get("BASE_IMAGE") or rendered.build_args["SLIM_IMAGE"]
        parent = self.engine.inspect_image(reference)
        pulled = ""
        if parent is None and self.settings.pull and not plan.flavour.workstation:
            pulled = self.engine.pull(reference, self._platform(plan))
            parent = self.engine.inspect_image(reference)
        if parent is None:
            return missing_parent(plan, reference, pulled)
        return platform_mismatch(parent.platform, plan) or parent

    def _request(
        self, plan: ImagePlan, rendered: RenderedImage, digest: str, epoch: int | None
    ) -> BuildRequest:
        """The builder's request: the context written, the labels, the cache references, the
        epoch the build stamps into the image."""
        s, made = self.settings, self.contexts
        files = context_files(rendered, made.inputs, input_hash=digest)
        folder = self.run.write_context(plan.name, files)
        # io.imagekit.managed is in the Dockerfile's labels (build/render.py).
        labels = {L.INPUT_HASH: digest, **dict(s.labels)}
        build_args = dict(rendered.build_args)
        if epoch is not None:
            build_args[SOURCE_DATE_EPOCH] = str(epoch)
            labels[L.SOURCE_DATE_EPOCH] = str(epoch)
        return BuildRequest(
            name=plan.name,
            context_dir=folder,
            reference=plan.reference,
            build_args=build_args,
            labels=labels,
            log_path=self.run.log_file(plan.name),
            no_cache=s.no_cache,
            keep_stages=s.keep_stages,
            ca_bundle=made.inputs.ca_bundle if made.options.buildkit else None,
            cache_from=_cache_ref(s.cache_from, plan),
            cache_to=_cache_ref(s.cache_to, plan),
            compression=s.compression,
            network=s.network.mode,
            platform=self._platform(plan),
        )

    def _measure(self, image_id: str, parent_id: str, used: Mapping[str, str]) -> Measured:
        """What the engine says of the image, with what it was built from."""
        built_from = tuple(Material(name=n, sha256=h) for n, h in sorted(used.items()))
        image = self.engine.inspect_image(image_id)
        if image is None:
            return Measured(image_id, parent_id=parent_id, materials=built_from)
        layers = sorted(self.engine.history(image_id), key=lambda x: -x.size_bytes)
        largest = tuple(
            LayerSize(size_bytes=x.size_bytes, created_by=x.created_by[:200])
            for x in layers[:LARGEST_LAYERS]
        )
        return Measured(
            image_id, image.size_bytes, len(image.layers), largest, parent_id, built_from
        )

    # The run --------------------------------------------------------------------

    def execute(self) -> list[BuildRecord]:
        """Build every plan, slim before the full of its cell, `jobs` at a time.

        Builds run in daemon threads and the main thread waits in short slices, so
        Ctrl-C ends the run at once: the process exits, its connections close, and
        the engine cancels the builds and removes their intermediate containers.
        """
        pending = list(self.plans)
        selected_slims = {p.cell.id for p in pending if not p.flavour.workstation}
        jobs = max(1, self.settings.jobs)
        done: queue.Queue[tuple[ImagePlan, BuildRecord | BaseException]] = queue.Queue()
        running: set[str] = set()
        stop = False
        while pending or running:
            for plan in list(pending):
                if stop or len(running) >= jobs:
                    break
                waiting_on = self._waits_for(plan, selected_slims)
                if waiting_on == "wait":
                    continue
                pending.remove(plan)
                if waiting_on is not None:
                    self._skip(plan, waiting_on)
                    continue
                running.add(plan.name)
                threading.Thread(
                    target=self._build_into, args=(plan, done), name=plan.name, daemon=True
                ).start()
            if stop and not running:
                for plan in pending:
                    self._skip(plan, "not built: --fail-fast stopped the run")
                pending.clear()
                break
            if not running:
                continue
            try:
                plan, outcome = done.get(timeout=0.5)
            except queue.Empty:
                continue
            running.discard(plan.name)
            if isinstance(outcome, BaseException):
                raise outcome
            self.results[plan.name] = outcome
            if not outcome.ok and self.settings.fail_fast:
                stop = True
        return [self.results[p.name] for p in self.plans if p.name in self.results]

    def _build_into(
        self, plan: ImagePlan, done: queue.Queue[tuple[ImagePlan, BuildRecord | BaseException]]
    ) -> None:
        try:
            done.put((plan, self.build_one(plan)))
        except BaseException as exc:  # re-raised in the main thread
            done.put((plan, exc))

    def _waits_for(self, plan: ImagePlan, selected_slims: set[str]) -> str | None:
        """ "wait" while the slim of a full plan is building; a reason to skip if it failed."""
        if not plan.flavour.workstation or plan.cell.id not in selected_slims:
            return None
        slim = f"{plan.cell.id}-slim"
        if slim not in self.results:
            return "wait"
        if not self.results[slim].ok:
            # A builder may fail without a message; that must not end the whole run.
            why = self.results[slim].message.splitlines()
            return "not built: its slim image failed" + (f" ({why[0]})" if why else "")
        return None

    def _skip(self, plan: ImagePlan, why: str) -> None:
        result = BuildRecord(
            name=plan.name,
            reference=plan.reference,
            flavour=plan.flavour,
            status=BuildStatus.SKIPPED,
            message=why,
            duration_s=0.0,
            builder=self.chosen.builder if self.chosen else None,
            builder_why=self.chosen.why if self.chosen else None,
        )
        self.results[plan.name] = result
        self.run.update_image(plan.name, _image_record(plan, result))
        skipped = BuildStatus.SKIPPED.value
        self.events(Event(EventKind.FINISHED, plan.name, why, skipped))


def _cache_ref(repository: str | None, plan: ImagePlan) -> str | None:
    """The cache reference of one image in `repository`, tagged as the image is (None: no
    cache)."""
    return f"{repository}:{plan.local_tag}" if repository else None


def _record(
    plan: ImagePlan,
    started: Start,
    status: BuildStatus,
    message: str,
    digest: str | None = None,
    measured: Measured | None = None,
    log_path: str | None = None,
) -> BuildRecord:
    """The build record of one image, once its outcome is known: an image over its size
    budget is a failure, whatever the build said."""
    found = measured or Measured(None)
    if (
        found.size_bytes is not None
        and plan.size_budget_bytes
        and (why := budget_problem(found.size_bytes, plan.size_budget_bytes))
    ):
        status, message = BuildStatus.FAILED, why
    return BuildRecord(
        name=plan.name,
        reference=plan.reference,
        flavour=plan.flavour,
        status=status,
        message=message,
        image_id=found.image_id,
        input_hash=digest,
        size_bytes=found.size_bytes,
        size_budget_bytes=plan.size_budget_bytes,
        layer_count=found.layer_count,
        largest_layers=found.largest_layers,
        duration_s=round(time.monotonic() - started.at_s, 3),
        log_path=log_path,
        builder=started.builder.builder if started.builder else None,
        builder_why=started.builder.why if started.builder else None,
        parent_id=found.parent_id,
        materials=found.materials,
    )


def _image_record(plan: ImagePlan, result: BuildRecord) -> ImageRecord:
    """The `plan` and `build` sections of an image's record."""
    cell = plan.cell
    return ImageRecord(
        plan=PlanRecord(
            name=plan.name,
            reference=plan.reference,
            tag=plan.tag,
            aliases=plan.aliases,
            flavour=plan.flavour,
            cell=asdict(cell),
            required_probes=plan.required_probes,
            size_budget_bytes=plan.size_budget_bytes,
        ),
        build=result,
    )
