"""Orchestration of `imagekit verify`: probes and structure checks per image, results recorded.

The expected versions come from each image's own labels, so any imagekit-built
image can be verified without its matrix. Each image's record is written as
soon as it is done; the summary and JUnit files are (re)written after every
image and at the end, so an interrupted run keeps what it finished.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from imagekit.compat import load_compat
from imagekit.containers import GpuUnavailableError, run_probes
from imagekit.engine import RUN_LABEL, inspect_image
from imagekit.errors import InputError
from imagekit.events import Event, EventSink
from imagekit.labelcheck import label_checks
from imagekit.levels import highest, rungs
from imagekit.probes import (
    MIN_SHM_BYTES,
    ProbeSpec,
    discover,
    expected_from_labels,
    overall,
    parse_events,
    select,
)
from imagekit.results import RunFolder, write_atomic
from imagekit.summary import junit, markdown

TIMEOUT_MARGIN_S = 60  # container start and `import torch` on a slow machine


@dataclass(frozen=True)
class Target:
    """One image to verify: a record name, the reference to run, and what must pass."""

    name: str
    reference: str
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class VerifySettings:
    """How to verify."""

    probes_dir: Path
    probes: tuple[str, ...] = ()
    gpus: str = "auto"  # auto | all | none
    timeout_s: float | None = None
    shm_bytes: int = 2 * MIN_SHM_BYTES
    structure: bool = True


def gpu_runtime_present(engine: dict[str, Any]) -> bool:
    """Whether the engine lists an NVIDIA runtime (the container toolkit)."""
    return any("nvidia" in r for r in engine.get("runtimes", []))


def _applicable(specs: list[ProbeSpec], flavour: str) -> list[ProbeSpec]:
    return [s for s in specs if not flavour or flavour in s.flavours]


class VerifyRun:
    """One `imagekit verify` over a list of images."""

    def __init__(
        self,
        client: docker.DockerClient,
        settings: VerifySettings,
        run: RunFolder,
        events: EventSink,
        engine: dict[str, Any],
    ) -> None:
        self.client = client
        self.settings = settings
        self.run = run
        self.events = events
        self.engine = engine
        self.specs = discover(settings.probes_dir)
        self.records: dict[str, dict[str, Any]] = {}
        self.use_gpus = settings.gpus == "all" or (
            settings.gpus == "auto" and gpu_runtime_present(engine)
        )

    def notes(self) -> list[str]:
        """What a person should know about how this run will go."""
        if self.settings.gpus == "auto" and not self.use_gpus:
            return ["no NVIDIA runtime on this engine: running CPU probes only (GPU probes skip)"]
        return []

    def verify_one(self, target: Target) -> dict[str, Any]:
        """Probe and inspect one image; its record is on disk when this returns."""
        started = time.monotonic()
        self.events(Event("started", target.name, f"verifying {target.reference}"))
        facts = inspect_image(self.client, target.reference)
        if facts is None:
            raise InputError(
                f"image {target.reference} is not in the engine",
                "build it first (imagekit build) or pull it",
            )
        labels = facts.labels
        flavour = labels.get("io.imagekit.flavour", "")
        chosen = _applicable(select(self.specs, list(self.settings.probes) or None), flavour)
        names = [s.name for s in chosen]
        timeout_s = self.settings.timeout_s or sum(s.timeout_s for s in chosen) + TIMEOUT_MARGIN_S
        expected = expected_from_labels(labels)
        run_labels = {RUN_LABEL: self.run.run_id, "io.imagekit.image": target.name}
        shm = max([self.settings.shm_bytes, *(s.shm_bytes for s in chosen)])

        def probe_run(gpus: bool) -> Any:
            return run_probes(
                self.client,
                facts.id,
                self.settings.probes_dir,
                names,
                expected,
                device="cuda" if gpus else "cpu",
                gpus=gpus,
                timeout_s=timeout_s,
                shm_bytes=shm,
                labels=run_labels,
            )

        try:
            outcome = probe_run(self.use_gpus)
        except GpuUnavailableError:
            if self.settings.gpus != "auto":
                raise
            self.use_gpus = False  # --gpus auto: the CPU probes still tell a lot
            outcome = probe_run(False)
        parsed = parse_events(
            outcome.stdout,
            names,
            timed_out=outcome.timed_out,
            exit_code=outcome.exit_code,
            stderr=outcome.stderr,
        )
        self.run.log_file(target.name, "verify").write_text(outcome.stdout + outcome.stderr)
        env = next((r for r in parsed.results if r["probe"] == "env"), None)
        structure = []
        if self.settings.structure:
            from imagekit.structure import check_image

            checks = check_image(
                self.client, facts.id, labels, env["facts"] if env else {}, run_labels
            )
            structure = [c.as_dict() for c in checks]
        label_agreement = [c.as_dict() for c in label_checks(labels, facts.env, load_compat())]
        required = list(target.required) or [r["probe"] for r in parsed.results]
        status = overall(parsed.results, required)
        inspection_ok = all(c["ok"] for c in (*structure, *label_agreement))
        if not inspection_ok:
            status = "fail"
        ran_on_gpu = parsed.device.startswith("cuda")
        state = rungs(
            parsed.results,
            {name: spec.level for name, spec in self.specs.items()},
            required,
            inspection_ok=inspection_ok,
            ran_on_gpu=ran_on_gpu,
            cuda_image=bool(labels.get("io.imagekit.cuda")),
        )
        record = {
            "image_id": facts.id,
            "reference": target.reference,
            "labels": labels,
            "size_bytes": facts.size_bytes,
            "device": parsed.device,
            "device_reason": parsed.device_reason,
            "level": highest(state),
            "levels": state,
            "status": status,
            "required_probes": required,
            "probes": parsed.results,
            "structure": structure,
            "labels_agree": label_agreement,
            "timings": {
                "container_start_s": round(outcome.start_s, 3),
                "probe_wall_s": round(outcome.wall_s, 3),
                "verify_wall_s": round(time.monotonic() - started, 3),
                "timeout_s": timeout_s,
                "timed_out": outcome.timed_out,
            },
        }
        self.run.update_image(target.name, "verify", record)
        self.records[target.name] = {"verify": record}
        self.write_reports()
        bad = [r["probe"] for r in parsed.results if r["status"] in ("fail", "error", "timeout")]
        message = f"{status} on {parsed.device or '?'}" + (f" ({', '.join(bad)})" if bad else "")
        self.events(Event("finished", target.name, message, {"status": status}))
        return record

    def write_reports(self) -> None:
        """summary.md and junit.xml for every image of this run so far."""
        records = self.load_records()
        write_atomic(self.run.root / "summary.md", markdown(records, self.run.run_id))
        write_atomic(self.run.root / "junit.xml", junit(records, self.run.run_id))

    def load_records(self) -> dict[str, dict[str, Any]]:
        """Every image record of this run folder, by name."""
        folder = self.run.root / "images"
        return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}

    def execute(self, targets: list[Target]) -> dict[str, dict[str, Any]]:
        """Verify every target; on any exit, the reports cover what finished."""
        try:
            for target in targets:
                self.verify_one(target)
        finally:
            self.write_reports()
            step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
            if step_summary:
                with open(step_summary, "a", encoding="utf-8") as handle:
                    handle.write((self.run.root / "summary.md").read_text())
        return self.records
