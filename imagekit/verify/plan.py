"""What `imagekit verify` will run, decided before any probe runs. Pure.

`VerifyPlan` is the run's: the probes folder's specs, whether images ask for GPUs, what a refusal
of them leads to (`GpuFallback`), and what a person should know before it starts. It is made from
the settings, the probe specs and the engine's facts; making it refuses `--gpus all` where the
engine would drop the request without a word. `TargetPlan` is one image's, made from the run's
plan and the image's own facts (its labels and platform): the probes that apply to its flavour,
the device, the time limits (stretched where it runs emulated), the multi-node run when one is
asked for, and the probes that must pass. `verify/run.py` carries them out over the ports.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from imagekit.errors import GpuUnavailableError, InputError
from imagekit.kernel import labels as L
from imagekit.kernel.engine import EngineInfo, LocalImage
from imagekit.kernel.runtime import (
    Emulation,
    GpuChoice,
    emulation_for,
    silent_gpu_drop,
    time_limit_s,
    use_gpus,
)
from imagekit.kernel.vocabulary import Runtime
from imagekit.verify.nodes import nodes_request
from imagekit.verify.ports import NodesRequest, ProbeRequest
from imagekit.verify.probe_contract import ProbeDevice, ProbeExpectations
from imagekit.verify.probes import ProbeSpec, multi_node, select
from imagekit.verify.requests import VerifySettings
from imagekit.verify.settings import Target

# Why an engine hands no GPUs over when it says nothing more precise (`EngineInfo.gpu_note`).
NO_GPU_RUNTIME = "no NVIDIA runtime and no CDI GPU devices on this engine"


class GpuFallback(StrEnum):
    """What a run does when the engine refuses an image the GPUs it asked for."""

    # That image runs again on the CPU, and every later image runs on the CPU only: the engine
    # that refused once will refuse again, and the CPU probes still tell a lot.
    CPU = "cpu"
    # The refusal is that image's error (it is not verified); the next image asks again.
    NONE = "none"

    @classmethod
    def of(cls, choice: GpuChoice) -> GpuFallback:
        """`--gpus auto` falls back to the CPU; `--gpus all` asked for GPUs, so going without
        them is an error; `--gpus none` never asks, so there is nothing to fall back from."""
        return cls.CPU if choice is GpuChoice.AUTO else cls.NONE


def fallback_message(why: str) -> str:
    """The line a person reads when `GpuFallback.CPU` took effect (`why`: the refusal)."""
    return (
        f"{why}; --gpus auto: this image and every later one run on the CPU "
        "(their GPU probes skip; --gpus all makes this an error)"
    )


@dataclass(frozen=True)
class TargetPlan:
    """What one image will run: one container of probes, then the multi-node run if any."""

    target: Target
    image: LocalImage
    emulation: Emulation
    request: ProbeRequest
    nodes: NodesRequest | None  # the multi-node run, when --nodes or the matrix asks for one
    # The probes that must pass; () for an image that names none (every probe that ran counts).
    # A multi-node probe that ran is added to them (`verify/record.py`, `required_probes`).
    required: tuple[str, ...]
    runtime: Runtime = Runtime.DOCKER  # what runs the probes (`--runtime`)

    @property
    def gpus(self) -> bool:
        """Whether this plan asks the engine for GPUs."""
        return self.request.gpus

    def on_cpu(self) -> TargetPlan:
        """The same runs without GPUs: what `GpuFallback.CPU` runs after a refusal."""
        request = replace(self.request, device=ProbeDevice.CPU, gpus=False)
        nodes = (
            None if self.nodes is None else replace(self.nodes, device=ProbeDevice.CPU, gpus=False)
        )
        return replace(self, request=request, nodes=nodes)


@dataclass(frozen=True)
class VerifyPlan:
    """How every image of one run is verified, before the first one is."""

    settings: VerifySettings
    specs: Mapping[str, ProbeSpec]  # every probe of the probes folder, by name
    gpus: bool  # whether images ask for GPUs (until a refusal and `fallback` say otherwise)
    fallback: GpuFallback
    engine_architecture: str | None  # the engine host's (x86_64, aarch64); None: unknown
    notes: tuple[str, ...] = ()  # what a person should know about the run

    @classmethod
    def of(
        cls, settings: VerifySettings, specs: Mapping[str, ProbeSpec], facts: EngineInfo
    ) -> VerifyPlan:
        """The plan of `settings` on an engine of `facts`; GpuUnavailableError for `--gpus all`
        on an engine that would start the probes without GPUs and say nothing."""
        if settings.runtime.exported:
            return cls._exported(settings, specs, facts)
        if silent_gpu_drop(settings.gpus, facts.name, facts.gpu_mechanism):
            raise GpuUnavailableError(
                f"--gpus all: {facts.describe()} would start the probes without GPUs",
                "use --gpus auto or none here, or an engine that passes GPUs (Docker with the "
                "NVIDIA runtime or CDI, Podman 5.4+ with CDI)",
            )
        gpus = use_gpus(settings.gpus, facts.gpu_runtime)
        notes: tuple[str, ...] = ()
        if settings.gpus is GpuChoice.AUTO and not gpus:
            why = facts.gpu_note or NO_GPU_RUNTIME
            notes = (f"{why}: running CPU probes only (GPU probes skip)",)
        fallback = GpuFallback.of(settings.gpus)
        return cls(settings, dict(specs), gpus, fallback, facts.architecture, notes)

    @classmethod
    def _exported(
        cls, settings: VerifySettings, specs: Mapping[str, ProbeSpec], facts: EngineInfo
    ) -> VerifyPlan:
        """Under an HPC runtime the engine only hands the image over: GPUs are the host's,
        injected into the exported image (`ch-fromhost --nvidia`) when `--gpus all` asks."""
        gpus = settings.gpus is GpuChoice.ALL
        notes: tuple[str, ...] = ()
        if settings.gpus is GpuChoice.AUTO:
            notes = (
                f"under {settings.runtime}, --gpus auto runs CPU probes only (GPU probes skip); "
                "--gpus all injects the host's NVIDIA driver (ch-fromhost --nvidia)",
            )
        fallback = GpuFallback.of(settings.gpus)
        return cls(settings, dict(specs), gpus, fallback, facts.architecture, notes)

    def for_target(
        self, target: Target, image: LocalImage, run_id: str, *, gpus: bool
    ) -> TargetPlan:
        """What `image` (inspected for `target`) runs in run `run_id`, with GPUs or without;
        InputError for a probe asked for that the folder lacks, or `--nodes` without a
        multi-node probe in it."""
        s = self.settings
        flavour = image.imagekit.flavour
        # The probes asked for (default: all) that apply to the image's flavour.
        asked = select(self.specs, list(s.probes) or None)
        chosen = [p for p in asked if not flavour or flavour in p.flavours]
        if not chosen:  # a container with nothing to run proves nothing: say so, for this image
            runs_on = ", ".join(f"{p.name} on {'/'.join(p.flavours)}" for p in asked)
            raise InputError(
                f"no probe asked for applies to a {flavour} image ({runs_on})",
                "leave --probes out, or name a probe of this image's flavour",
            )
        labels = {L.RUN_ID: run_id, L.IMAGE: target.name}
        emulation = emulation_for(image.platform, self.engine_architecture)
        request = ProbeRequest(
            image=image.id,
            probes_dir=s.probes_folder,
            probes=tuple(p.name for p in chosen),
            # A probe's own time limits (compile's child, ddp's rendezvous) stretch as ours do.
            expected=ProbeExpectations.of_image(image.imagekit, time_scale=emulation.slowdown),
            device=ProbeDevice.CUDA if gpus else ProbeDevice.CPU,
            gpus=gpus,
            timeout_s=time_limit_s(s.timeout_s, (p.timeout_s for p in chosen), emulation.slowdown),
            shm_bytes=max([s.shm_bytes, *(p.shm_bytes for p in chosen)]),
            memory_bytes=max(p.memory_bytes for p in chosen),
            labels=labels,
            environment=emulation.environment,
        )
        nodes = self._nodes(target, image, labels, emulation, gpus)
        # The matrix's required probes; for an image named on the command line, those
        # `--probes` asked for, else those its labels name.
        required = target.required or s.probes or image.imagekit.required_probes
        return TargetPlan(target, image, emulation, request, nodes, tuple(required), s.runtime)

    def _nodes(
        self,
        target: Target,
        image: LocalImage,
        labels: Mapping[str, str],
        emulation: Emulation,
        gpus: bool,
    ) -> NodesRequest | None:
        """The multi-node run of `image`: across the most nodes the run or the matrix asks
        for, where that is two or more and the probe applies to the image's flavour."""
        nodes = max(self.settings.nodes, target.nodes)
        if nodes < 2:
            return None
        spec = multi_node(self.specs)
        flavour = image.imagekit.flavour
        if flavour and flavour not in spec.flavours:
            return None
        return nodes_request(
            spec,
            image=image.id,
            probes_dir=self.settings.probes_folder,
            nodes=nodes,
            gpus=gpus,
            timeout_s=self.settings.timeout_s,
            shm_bytes=self.settings.shm_bytes,
            labels=labels,
            emulation=emulation,
        )
