"""Orchestration of `imagekit build`: render, skip what is up to date, build, measure, record.

Sequences the pure core (render, input hash, budget) over the adapters (engine,
builders, results folder) and reports progress as events; never prints. One
failing image never stops the others unless `fail_fast` is set; a `full` image
waits for the `slim` image of its cell.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from imagekit.core import labels as L
from imagekit.core.build_stream import BuildLog
from imagekit.core.context import ContextInputs, input_hash, write_context
from imagekit.core.plan import ImagePlan
from imagekit.core.ports import Builder, BuildRequest, Engine, RunStore
from imagekit.core.records import BuildRecord, ImageRecord, PlanRecord
from imagekit.core.render import RenderOptions, render_image
from imagekit.core.runtime import runs_emulated
from imagekit.events import Event, EventSink

LARGEST_LAYERS = 5

BUILT, UP_TO_DATE, FAILED, SKIPPED = "built", "up-to-date", "failed", "skipped"


@dataclass(frozen=True)
class BuildSettings:
    """Everything about how to build, apart from what."""

    options: RenderOptions
    inputs: ContextInputs
    contexts_dir: Path
    jobs: int = 1
    no_cache: bool = False
    fail_fast: bool = False
    # Pull a missing base image (where a registry is reachable, e.g. CI); off by default so
    # that an air-gapped build fails at once with a hint instead of waiting on DNS.
    pull: bool = False
    extra_labels: tuple[tuple[str, str], ...] = ()
    # BuildKit's registry cache: repositories that hold one cache per image, tagged as it is.
    cache_from: str | None = None
    cache_to: str | None = None
    compression: str | None = None  # every layer forced to gzip or zstd (BuildKit)
    network: str | None = None  # the RUN steps' network; "none": the build must be offline

    def cache_ref(self, repository: str | None, plan: ImagePlan) -> str | None:
        """The cache reference of one image in `repository` (None: no cache)."""
        return f"{repository}:{plan.local_tag}" if repository else None


def _platform_mismatch(parent_platform: str, plan: ImagePlan) -> str | None:
    """Why the image a build starts FROM cannot make `plan`'s platform (None: it can, or the
    engine did not say): an amd64 base under an arm64 image would give an amd64 image that
    says it is arm64."""
    found = "/".join(parent_platform.split("/")[:2])  # linux/arm64/v8 -> linux/arm64
    if not found or found == plan.platform:
        return None
    parent = "base image" if plan.flavour == "slim" else "slim image"
    return (
        f"the {parent} is {found}, not {plan.platform}: give bases a {plan.platform} image "
        f"(`bases: {{OS: {{{plan.platform}: IMAGE}}}}`, e.g. one `imagekit base bootstrap "
        f"--arch {plan.platform.split('/')[1]}` makes)"
    )


@dataclass
class ImageResult:
    """The outcome of one image of a build run."""

    name: str
    reference: str
    flavour: str
    status: str
    message: str = ""
    image_id: str | None = None
    input_hash: str | None = None
    size_bytes: int | None = None
    size_budget_bytes: int | None = None
    layer_count: int | None = None
    largest_layers: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    log_path: str | None = None

    @property
    def ok(self) -> bool:
        """Built or up to date, and within budget."""
        return self.status in (BUILT, UP_TO_DATE)


def budget_problem(size_bytes: int, budget_bytes: int) -> str | None:
    """None when within budget; else both numbers, for the person reading it."""
    if size_bytes <= budget_bytes:
        return None
    return (
        f"over budget: {size_bytes:,} bytes ({size_bytes / 1e9:.2f} GB) > "
        f"{budget_bytes:,} bytes ({budget_bytes / 1e9:.2f} GB)"
    )


def _step_reporter(events: EventSink, name: str) -> Any:
    # Keyed by the step number too: two steps in a row with the same instruction
    # (`RUN true` twice) are still two steps.
    last: dict[str, tuple[int, str]] = {"step": (0, "")}

    def on_line(log: BuildLog, line: str) -> None:
        if log.step and (log.step_index, log.step) != last["step"]:
            last["step"] = (log.step_index, log.step)
            events(Event("step", name, f"step {log.step_index}/{log.step_count}: {log.step}"))

    return on_line


class BuildRun:
    """One `imagekit build` over a list of plans."""

    def __init__(
        self,
        engine: Engine,
        builder: Builder,
        plans: list[ImagePlan],
        settings: BuildSettings,
        run: RunStore,
        events: EventSink,
    ) -> None:
        self.engine = engine
        self.builder = builder
        self.plans = plans
        self.settings = settings
        self.run = run
        self.events = events
        self.results: dict[str, ImageResult] = {}
        self.host_arch = engine.info().architecture

    def _platform(self, plan: ImagePlan) -> str | None:
        """The platform to ask the builder (and a pull) for: none for the engine's own, so a
        native build is the same request as ever (engines differ in what they do with it);
        the plan's for any other, or where the engine did not say what it runs on."""
        native = self.host_arch is not None and not runs_emulated(plan.platform, self.host_arch)
        return None if native else plan.platform

    # One image ------------------------------------------------------------------

    def build_one(self, plan: ImagePlan) -> ImageResult:
        """Render, check for an up-to-date image, build, measure and record one plan."""
        started = time.monotonic()
        result = self._build_one(plan)
        result.duration_s = round(time.monotonic() - started, 3)
        self.run.update_image(plan.name, _image_record(plan, result))
        data: dict[str, Any] = {"status": result.status}
        if result.log_path and Path(result.log_path).is_file():
            # The views fold this log (GitHub Actions `::group::`); the builder wrote it.
            log_text = Path(result.log_path).read_text(encoding="utf-8", errors="replace")
            data["log_lines"] = log_text.splitlines()
        self.events(Event("finished", plan.name, _summary(result), data))
        return result

    def _build_one(self, plan: ImagePlan) -> ImageResult:
        s = self.settings
        result = ImageResult(plan.name, plan.reference, plan.flavour, FAILED)
        result.size_budget_bytes = plan.size_budget_bytes
        rendered = render_image(plan, s.options)
        parent_ref = rendered.build_args.get("BASE_IMAGE") or rendered.build_args["SLIM_IMAGE"]
        parent = self.engine.inspect_image(parent_ref)
        pulled = ""
        if parent is None and s.pull and plan.flavour == "slim":
            pulled = self.engine.pull(parent_ref, self._platform(plan))
            parent = self.engine.inspect_image(parent_ref)
        if parent is None:
            what = "base image" if plan.flavour == "slim" else "slim image of this cell"
            hint = (
                "pull it with --pull, bootstrap one (`imagekit base bootstrap`) or map it "
                "with --base-override"
                if plan.flavour == "slim"
                else "build the slim flavour first (drop --flavour full)"
            )
            result.message = f"the {what} {parent_ref} is not in the engine; {hint}"
            if pulled:
                result.message += f" (pull failed: {pulled})"
            return result
        if (why := _platform_mismatch(parent.platform, plan)) is not None:
            result.message = why
            return result
        engine_inputs = {"parent_image_id": parent.id}
        if s.compression:
            # Other layers, other image: an image is not up to date for a build that forces
            # another compression. (Only named when forced, so existing hashes stay.)
            engine_inputs["layer_compression"] = s.compression
        digest = input_hash(rendered, s.inputs, engine_inputs)
        result.input_hash = digest
        existing = self.engine.inspect_image(plan.reference)
        if existing is not None and not s.no_cache and existing.labels.get(L.INPUT_HASH) == digest:
            result.status = UP_TO_DATE
            result.message = "up to date"
            self._measure(result, existing.id)
            return result
        self.events(Event("started", plan.name, f"building with {self.builder.name}"))
        folder = write_context(rendered, s.contexts_dir, s.inputs, input_hash=digest)
        labels = {L.INPUT_HASH: digest, L.MANAGED: "true", **dict(s.extra_labels)}
        request = BuildRequest(
            name=plan.name,
            context_dir=folder,
            reference=plan.reference,
            build_args=rendered.build_args,
            labels=labels,
            log_path=self.run.log_file(plan.name),
            no_cache=s.no_cache,
            ca_bundle=s.inputs.ca_bundle if s.options.buildkit else None,
            cache_from=s.cache_ref(s.cache_from, plan),
            cache_to=s.cache_ref(s.cache_to, plan),
            compression=s.compression,
            network=s.network,
            platform=self._platform(plan),
        )
        result.log_path = str(request.log_path)
        outcome = self.builder.build(request, _step_reporter(self.events, plan.name))
        if not outcome.ok or outcome.image_id is None:
            result.message = outcome.message
            return result
        result.status = BUILT
        result.message = "built"
        self._measure(result, outcome.image_id)
        return result

    def _measure(self, result: ImageResult, image_id: str) -> None:
        image = self.engine.inspect_image(image_id)
        result.image_id = image_id
        if image is None:
            return
        result.size_bytes = image.size_bytes
        result.layer_count = len(image.layers)
        layers = sorted(self.engine.history(image_id), key=lambda x: -x.size_bytes)
        result.largest_layers = [
            {"size_bytes": x.size_bytes, "created_by": x.created_by[:200]}
            for x in layers[:LARGEST_LAYERS]
        ]
        if result.size_budget_bytes and (
            why := budget_problem(image.size_bytes, result.size_budget_bytes)
        ):
            result.status = FAILED
            result.message = why

    # The run --------------------------------------------------------------------

    def execute(self) -> list[ImageResult]:
        """Build every plan, slim before the full of its cell, `jobs` at a time.

        Builds run in daemon threads and the main thread waits in short slices, so
        Ctrl-C ends the run at once: the process exits, its connections close, and
        the engine cancels the builds and removes their intermediate containers.
        """
        pending = list(self.plans)
        selected_slims = {p.cell.id for p in pending if p.flavour == "slim"}
        jobs = max(1, self.settings.jobs)
        done: queue.Queue[tuple[ImagePlan, ImageResult | BaseException]] = queue.Queue()
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
        self, plan: ImagePlan, done: queue.Queue[tuple[ImagePlan, ImageResult | BaseException]]
    ) -> None:
        try:
            done.put((plan, self.build_one(plan)))
        except BaseException as exc:  # re-raised in the main thread
            done.put((plan, exc))

    def _waits_for(self, plan: ImagePlan, selected_slims: set[str]) -> str | None:
        """ "wait" while the slim of a full plan is building; a reason to skip if it failed."""
        if plan.flavour != "full" or plan.cell.id not in selected_slims:
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
        result = ImageResult(plan.name, plan.reference, plan.flavour, SKIPPED, why)
        self.results[plan.name] = result
        self.run.update_image(plan.name, _image_record(plan, result))
        self.events(Event("finished", plan.name, why, {"status": SKIPPED}))


def _summary(result: ImageResult) -> str:
    if result.status in (BUILT, UP_TO_DATE):
        size = f"{result.size_bytes / 1e9:.2f} GB" if result.size_bytes else "?"
        return f"{result.status} ({size}, {result.layer_count} layers, {result.duration_s:.0f}s)"
    return f"{result.status}: {result.message.splitlines()[0] if result.message else ''}"


def _image_record(plan: ImagePlan, result: ImageResult) -> ImageRecord:
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
        build=BuildRecord.model_validate(asdict(result)),
    )
