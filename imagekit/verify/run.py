"""The use case of `imagekit verify`: probes and inspection per image, results recorded.

The expected versions come from each image's own labels, so any imagekit-built image can be
verified without its matrix. What each image runs is decided by the plan (`verify/plan.py`),
and its record by `verify/record.py`; this module carries them out over the ports. Each image's
record is written as soon as it is done; the summary and JUnit files are (re)written from the
records held here after every image and at the end, so an interrupted run keeps what it
finished.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from imagekit.errors import (
    EngineUnavailableError,
    GpuUnavailableError,
    ImagekitError,
    InputError,
    NotVerifiedError,
    ProbeFailedError,
)
from imagekit.events import Event, EventKind, EventSink
from imagekit.kernel.engine import Engine, LocalImage
from imagekit.kernel.records import Check, ImageRecord, Verdict, VerifyRecord
from imagekit.kernel.store import RunStore
from imagekit.matrix.compat import CompatData
from imagekit.verify.nodes import add_nodes
from imagekit.verify.plan import GpuFallback, TargetPlan, VerifyPlan, fallback_message
from imagekit.verify.ports import Inspector, ProbeRun, ProbeRunner
from imagekit.verify.probes import discover
from imagekit.verify.record import Inspection, inspection_of, record_of
from imagekit.verify.requests import VerifySettings
from imagekit.verify.settings import Target
from imagekit.verify.summary import junit, markdown


def engine_gone(exc: ImagekitError) -> bool:
    """Whether `exc` means the engine stopped answering, so no later image can be verified
    either (no GPUs for one image is not that)."""
    return isinstance(exc, EngineUnavailableError) and not isinstance(exc, GpuUnavailableError)


class VerifyRun:
    """One `imagekit verify` over a list of images: its plan carried out over the ports.

    `of` reads the probes folder and the engine's facts and makes the plan (and may refuse
    the run); the constructor only keeps what it is given.
    """

    def __init__(
        self,
        plan: VerifyPlan,
        engine: Engine,
        runner: ProbeRunner,
        inspector: Inspector,
        store: RunStore,
        events: EventSink,
        compat: CompatData,
    ) -> None:
        self.plan = plan
        self.engine = engine
        self.runner = runner
        self.inspector = inspector
        self.store = store
        self.events = events
        self.compat = compat
        # Whether the next image asks for GPUs: the plan's, until the engine refuses them and
        # the plan's `fallback` is to go on on the CPU.
        self.gpus = plan.gpus
        self.records: dict[str, VerifyRecord] = {}
        self.errors: dict[str, str] = {}  # image -> why it could not be verified
        self.failures: list[ImagekitError] = []

    @classmethod
    def of(
        cls,
        engine: Engine,
        runner: ProbeRunner,
        inspector: Inspector,
        store: RunStore,
        settings: VerifySettings,
        events: EventSink,
        compat: CompatData,
    ) -> VerifyRun:
        """A run of `settings` on `engine`, planned: InputError for a probe file that is not
        one, GpuUnavailableError for `--gpus all` that the engine would drop unsaid."""
        plan = VerifyPlan.of(settings, discover(settings.probes_folder), engine.info())
        return cls(plan, engine, runner, inspector, store, events, compat)

    def notes(self) -> list[str]:
        """What a person should know about how this run will go."""
        return list(self.plan.notes)

    # One image ------------------------------------------------------------------

    def verify_one(self, target: Target) -> VerifyRecord:
        """Probe and inspect one image; its record is on disk when this returns."""
        started = time.monotonic()
        self.events(Event(EventKind.STARTED, target.name, f"verifying {target.reference}"))
        image = self._image(target)
        planned = self.plan.for_target(target, image, self.store.run_id, gpus=self.gpus)
        planned, outcome = self._run(planned)
        if planned.nodes is not None:
            # Its result always joins the run's, and `required_probes` counts it.
            outcome = add_nodes(self.runner, planned.nodes, outcome)
        self.store.write_log(target.name, "verify", outcome.log)
        inspection = self._inspect(planned, outcome)
        wall_s = time.monotonic() - started
        record = record_of(planned, outcome, inspection, self.plan.specs, wall_s)
        self.store.update_image(target.name, ImageRecord(verify=record))
        self.records[target.name] = record
        self.write_reports()
        bad = [r.probe for r in record.probes if r.status.bad]
        message = f"{record.status} on {record.device or '?'}" + (
            f" ({', '.join(bad)})" if bad else ""
        )
        self.events(Event(EventKind.FINISHED, target.name, message, record.status))
        return record

    def _image(self, target: Target) -> LocalImage:
        image = self.engine.inspect_image(target.reference)
        if image is None:
            raise InputError(
                f"image {target.reference} is not in the engine",
                "build it first (imagekit build) or pull it",
            )
        return image

    def _run(self, planned: TargetPlan) -> tuple[TargetPlan, ProbeRun]:
        """The probes of `planned` run, and the plan they ran: where the engine refuses the
        GPUs and the plan falls back (`GpuFallback.CPU`), the same on the CPU, and every later
        image on the CPU too, which the person is told."""
        try:
            return planned, self.runner.run(planned.request)
        except GpuUnavailableError as exc:
            if self.plan.fallback is not GpuFallback.CPU:
                raise
            self.gpus = False
            self.events(Event(EventKind.STEP, planned.target.name, fallback_message(exc.message)))
            planned = planned.on_cpu()
            return planned, self.runner.run(planned.request)

    def _inspect(self, planned: TargetPlan, outcome: ProbeRun) -> Inspection:
        """The structure checks (unless turned off) and what `inspection_of` adds to them."""
        structure: list[Check] = []
        image = planned.image
        if self.plan.settings.structure:
            structure = self.inspector.structure(image.id, image.labels, planned.request.labels)
        return inspection_of(image, structure, outcome.output.results, self.compat)

    # The run --------------------------------------------------------------------

    def outcome_error(self, total: int) -> ImagekitError | None:
        """Why the run as a whole did not pass (of `total` images), or None: an image that could
        not be verified comes first (its own exit code), then images that failed."""
        if self.failures:
            first = self.failures[0]
            names = ", ".join(self.errors)
            return NotVerifiedError(
                f"{len(self.errors)} of {total} images could not be verified ({names}): "
                f"{first.message}",
                first.hint,
                first.exit_code,
            )
        failed = [n for n, r in self.records.items() if r.status is not Verdict.PASS]
        if failed:
            return ProbeFailedError(
                f"{len(failed)} of {len(self.records)} images failed verification: "
                f"{', '.join(failed)}",
                f"details: {self.store.root / 'summary.md'}",
            )
        return None

    def write_reports(self) -> None:
        """summary.md and junit.xml for every image of this run so far, from the records held
        here: the store is written, never read back (each image's file holds what it holds)."""
        records = {name: ImageRecord(verify=r) for name, r in self.records.items()}
        run_id = self.store.run_id
        self.store.write_report("summary.md", markdown(records, run_id, self.errors))
        self.store.write_report("junit.xml", junit(records, run_id, self.errors))

    def execute(
        self, targets: Sequence[Target], step_summary: Path | None = None
    ) -> dict[str, VerifyRecord]:
        """Verify every target; on any exit, the reports cover what finished, and the summary
        is added to `step_summary` (GitHub's step summary file) when one is given.

        An image that cannot be verified (not in the engine, the engine refused something)
        is recorded in `errors` and the others go on; when the engine stops answering, the
        images not reached are recorded as such and the run ends.
        """
        try:
            for index, target in enumerate(targets):
                try:
                    self.verify_one(target)
                except ImagekitError as exc:
                    self.errors[target.name] = exc.message
                    self.failures.append(exc)
                    self.events(
                        Event(EventKind.FINISHED, target.name, f"not verified: {exc.message}")
                    )
                    if engine_gone(exc):
                        for rest in targets[index + 1 :]:
                            self.errors[rest.name] = "not reached: the engine stopped answering"
                        break
        finally:
            self.write_reports()
            if step_summary is not None:
                self.store.append_report_to("summary.md", step_summary)
        return self.records
