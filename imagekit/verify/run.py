"""Orchestration of `imagekit verify`: probes and inspection per image, results recorded.

The expected versions come from each image's own labels, so any imagekit-built image can be
verified without its matrix. Each image's record is written as soon as it is done; the summary
and JUnit files are (re)written after every image and at the end, so an interrupted run keeps
what it finished.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from imagekit.errors import (
    EngineUnavailableError,
    GpuUnavailableError,
    ImagekitError,
    InputError,
    NotVerifiedError,
    ProbeFailedError,
)
from imagekit.events import Event, EventKind, EventSink
from imagekit.kernel import labels as L
from imagekit.kernel.engine import Engine, LocalImage
from imagekit.kernel.records import (
    LEVELS,
    Check,
    ImageRecord,
    LevelState,
    ProbeResult,
    Timings,
    Verdict,
    VerifyRecord,
)
from imagekit.kernel.runtime import (
    NATIVE,
    Emulation,
    GpuChoice,
    emulation_for,
    silent_gpu_drop,
    time_limit_s,
    use_gpus,
)
from imagekit.kernel.store import RunStore
from imagekit.matrix.compat import CompatData
from imagekit.verify.agreement import Identity, compare, label_checks
from imagekit.verify.levels import level_states, reached
from imagekit.verify.nodes import run_across
from imagekit.verify.ports import Inspector, ProbeRequest, ProbeRun, ProbeRunner
from imagekit.verify.probe_contract import ProbeDevice, ProbeExpectations
from imagekit.verify.probes import ProbeSpec, discover, multi_node, overall, select
from imagekit.verify.settings import Target, VerifySettings
from imagekit.verify.summary import junit, markdown


def engine_gone(exc: ImagekitError) -> bool:
    """Whether `exc` means the engine stopped answering, so no later image can be verified
    either (no GPUs for one image is not that)."""
    return isinstance(exc, EngineUnavailableError) and not isinstance(exc, GpuUnavailableError)


class VerifyRun:
    """One `imagekit verify` over a list of images."""

    def __init__(
        self,
        engine: Engine,
        runner: ProbeRunner,
        inspector: Inspector,
        store: RunStore,
        settings: VerifySettings,
        events: EventSink,
        compat: CompatData,
    ) -> None:
        self.engine = engine
        self.runner = runner
        self.inspector = inspector
        self.store = store
        self.settings = settings
        self.events = events
        self.compat = compat
        self.specs = discover(settings.probes_dir)
        facts = engine.info()
        if silent_gpu_drop(settings.gpus, facts.name, facts.gpu_mechanism):
            raise GpuUnavailableError(
                f"--gpus all: {facts.describe()} would start the probes without GPUs",
                "use --gpus auto or none here, or an engine that passes GPUs (Docker with the "
                "NVIDIA runtime or CDI, Podman 5.4+ with CDI)",
            )
        self.use_gpus = use_gpus(settings.gpus, facts.gpu_runtime)
        self.engine_arch = facts.architecture
        self.gpu_note = facts.gpu_note
        self.records: dict[str, VerifyRecord] = {}
        self.errors: dict[str, str] = {}  # image -> why it could not be verified
        self.failures: list[ImagekitError] = []

    def notes(self) -> list[str]:
        """What a person should know about how this run will go."""
        if self.settings.gpus is GpuChoice.AUTO and not self.use_gpus:
            why = self.gpu_note or "no NVIDIA runtime and no CDI GPU devices on this engine"
            return [f"{why}: running CPU probes only (GPU probes skip)"]
        return []

    # One image ------------------------------------------------------------------

    def verify_one(self, target: Target) -> VerifyRecord:
        """Probe and inspect one image; its record is on disk when this returns."""
        started = time.monotonic()
        self.events(Event(EventKind.STARTED, target.name, f"verifying {target.reference}"))
        image = self._image(target)
        chosen = self._probes_for(image)
        run_labels = {L.RUN_ID: self.store.run_id, L.IMAGE: target.name}
        emulation = emulation_for(image.platform, self.engine_arch)
        request = self._request(image, chosen, run_labels, emulation)
        outcome = self._run(request)
        nodes = max(self.settings.nodes, target.nodes)
        across = self._across() if nodes > 1 else None
        flavour = image.imagekit.flavour
        if across is not None and (not flavour or flavour in across.flavours):
            # Its result always joins the run's, and `_required` counts it.
            outcome = self._run_nodes(image, nodes, outcome, run_labels, emulation)
        self.store.write_log(target.name, "verify", outcome.log)
        inspection = self._inspect(image, outcome, run_labels)
        record = self._record(target, image, outcome, request, inspection, started, emulation)
        self.store.update_image(target.name, ImageRecord(verify=record))
        self.records[target.name] = record
        self.write_reports()
        bad = [r.probe for r in record.probes if r.status.bad]
        message = f"{record.status} on {record.device or '?'}" + (
            f" ({', '.join(bad)})" if bad else ""
        )
        self.events(Event(EventKind.FINISHED, target.name, message, record.status))
        return record

    def _required(
        self, target: Target, image: LocalImage, results: Sequence[ProbeResult]
    ) -> list[str]:
        """The matrix's required probes; for an image named on the command line, those
        `--probes` asked for, else those its labels name, else (an image from before that
        label, or not imagekit's) every probe that ran."""
        required = (
            list(target.required)
            or list(self.settings.probes)
            or list(image.imagekit.required_probes)
            or [r.probe for r in results]
        )
        # A multi-node probe runs only when --nodes asks for it: then it counts, always.
        across = [
            r.probe for r in results if r.probe in self.specs and self.specs[r.probe].nodes > 1
        ]
        return required + [p for p in across if p not in required]

    def _image(self, target: Target) -> LocalImage:
        image = self.engine.inspect_image(target.reference)
        if image is None:
            raise InputError(
                f"image {target.reference} is not in the engine",
                "build it first (imagekit build) or pull it",
            )
        return image

    def _probes_for(self, image: LocalImage) -> list[ProbeSpec]:
        """The probes asked for (default: all) that apply to the image's flavour."""
        flavour = image.imagekit.flavour
        asked = select(self.specs, list(self.settings.probes) or None)
        return [s for s in asked if not flavour or flavour in s.flavours]

    def _request(
        self,
        image: LocalImage,
        chosen: Sequence[ProbeSpec],
        run_labels: dict[str, str],
        emulation: Emulation = NATIVE,
    ) -> ProbeRequest:
        return ProbeRequest(
            image=image.id,
            probes_dir=self.settings.probes_dir,
            probes=tuple(s.name for s in chosen),
            # A probe's own time limits (compile's child, ddp's rendezvous) stretch as ours do.
            expected=ProbeExpectations.of_image(image.imagekit, time_scale=emulation.slowdown),
            device=ProbeDevice.CUDA if self.use_gpus else ProbeDevice.CPU,
            gpus=self.use_gpus,
            timeout_s=time_limit_s(
                self.settings.timeout_s, (s.timeout_s for s in chosen), emulation.slowdown
            ),
            shm_bytes=max([self.settings.shm_bytes, *(s.shm_bytes for s in chosen)]),
            memory_bytes=max(s.memory_bytes for s in chosen),
            labels=run_labels,
            environment=emulation.environment,
        )

    def _run(self, request: ProbeRequest) -> ProbeRun:
        try:
            return self.runner.run(request)
        except GpuUnavailableError:
            if self.settings.gpus is not GpuChoice.AUTO:
                raise
            self.use_gpus = False  # --gpus auto: the CPU probes still tell a lot
            return self.runner.run(replace(request, device=ProbeDevice.CPU, gpus=False))

    def _across(self) -> ProbeSpec:
        """The multi-node probe of the probes folder."""
        return multi_node(self.specs)

    def _run_nodes(
        self,
        image: LocalImage,
        nodes: int,
        outcome: ProbeRun,
        run_labels: dict[str, str],
        emulation: Emulation = NATIVE,
    ) -> ProbeRun:
        """`outcome` with the multi-node probe's result (and log) added."""
        return run_across(
            self.runner,
            self._across(),
            outcome,
            image=image.id,
            probes_dir=self.settings.probes_dir,
            nodes=nodes,
            gpus=self.use_gpus,
            timeout_s=self.settings.timeout_s,
            shm_bytes=self.settings.shm_bytes,
            labels=run_labels,
            emulation=emulation,
        )

    def _inspect(
        self, image: LocalImage, outcome: ProbeRun, run_labels: dict[str, str]
    ) -> tuple[list[Check], list[Check]]:
        """The structure checks (the labels against what runs inside among them) and the
        labels against the compatibility data."""
        structure: list[Check] = []
        if self.settings.structure:
            structure = self.inspector.structure(image.id, image.labels, run_labels)
        env = next((r for r in outcome.output.results if r.probe == "env"), None)
        if env is not None and image.imagekit.is_imagekit:
            structure += compare(Identity.from_labels(image.imagekit), env.facts, "label")
        checks = label_checks(dict(image.labels), dict(image.env), self.compat, image.platform)
        return structure, checks

    def _record(
        self,
        target: Target,
        image: LocalImage,
        outcome: ProbeRun,
        request: ProbeRequest,
        inspection: tuple[list[Check], list[Check]],
        started: float,
        emulation: Emulation = NATIVE,
    ) -> VerifyRecord:
        structure, agreement = inspection
        results = outcome.output.results
        required = self._required(target, image, results)
        inspection_ok = all(c.ok for c in (*structure, *agreement))
        status = overall(results, required) if inspection_ok else Verdict.FAIL
        states = level_states(
            results,
            {name: spec.level for name, spec in self.specs.items()},
            required,
            inspection_ok=inspection_ok,
            ran_on_gpu=outcome.output.device.startswith("cuda"),
            cuda_image=image.imagekit.cuda is not None,
        )
        return VerifyRecord(
            image_id=image.id,
            reference=target.reference,
            labels=dict(image.labels),
            size_bytes=image.size_bytes,
            platform=image.platform,
            emulated=emulation.emulated,
            emulated_cpu=emulation.cpu,
            device=outcome.output.device,
            device_reason=outcome.output.device_reason,
            level=reached(states),
            levels=states,
            status=status,
            required_probes=tuple(required),
            # A level that does not apply to the image (gpu on a CPU image) is never required.
            required_levels=tuple(
                level
                for level in LEVELS
                if states[level] is not LevelState.NOT_APPLICABLE
                and any(self.specs[p].level is level for p in required if p in self.specs)
            ),
            probes=results,
            structure=tuple(structure),
            labels_agree=tuple(agreement),
            timings=Timings(
                container_start_s=round(outcome.start_s, 3),
                probe_wall_s=round(outcome.wall_s, 3),
                verify_wall_s=round(time.monotonic() - started, 3),
                timeout_s=request.timeout_s,
                timed_out=outcome.timed_out,
            ),
        )

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
        """summary.md and junit.xml for every image of this run so far."""
        records = self.store.images()
        run_id = self.store.run_id
        self.store.write_report("summary.md", markdown(records, run_id, self.errors))
        self.store.write_report("junit.xml", junit(records, run_id, self.errors))

    def execute(self, targets: Sequence[Target]) -> dict[str, VerifyRecord]:
        """Verify every target; on any exit, the reports cover what finished.

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
            if self.settings.step_summary is not None:
                self.store.append_report_to("summary.md", self.settings.step_summary)
        return self.records
