"""Adapter: the engine, run folder and probe runner a verify works with, opened in the order
that keeps bad input ahead of any record: the results folder and the runtime checked, then the
engine opened and asked
whatever the caller checks (that it holds the images), and only then the run folder made (a
verify of images the engine lacks leaves no folder)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from imagekit.adapters import engine as docker
from imagekit.adapters.charliecloud import require_runtime
from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.results import RunFacts, RunFolder, results_key
from imagekit.kernel.vocabulary import Runtime
from imagekit.verify.ports import ProbeRunner
from imagekit.verify.requests import VerifySettings


def open_verify_run(
    results: Path,
    images: Sequence[str],
    checks: Sequence[Callable[[DockerEngine], None]],
    settings: VerifySettings | None = None,
) -> tuple[DockerEngine, RunFolder]:
    """The engine, once each of `checks` has passed on it, and the run folder of `images`, its
    run.json written and its records sealed with IMAGEKIT_RESULTS_KEY when that is set. The
    runtime `settings` ask for is checked first (`require_runtime`)."""
    RunFolder.check_writable(results)
    if settings is not None:
        require_runtime(settings.runtime, slurm=settings.slurm)
    engine = docker.open_engine()
    for check in checks:
        check(engine)
    key = results_key()
    facts = RunFacts(images=list(images), sealed_with_key=key is not None)
    return engine, RunFolder.begin(results, "verify", engine.info(), facts, seal_key=key)


@contextlib.contextmanager
def probe_runner(
    engine: DockerEngine, settings: VerifySettings, run: Path, say: Callable[[str], None]
) -> Iterator[ProbeRunner]:
    """What runs the probes while the block runs: the engine's containers, ch-run on each
    image exported from it, or Slurm jobs under ch-run on the image exported into the run
    folder `run`, which the nodes share (`require_runtime` has refused the runtimes that cannot
    run here). What the runner keeps between images (an export) goes when the block ends.
    `say(line)`: a line for the person waiting (why a Slurm job is pending)."""
    if settings.slurm:
        from imagekit.adapters.slurm import SlurmRunner

        slurm = SlurmRunner(engine, run / "slurm", settings.slurm_ask, say)
        try:
            yield slurm
        finally:
            slurm.close()
    elif settings.runtime is Runtime.CHARLIECLOUD:
        from imagekit.adapters.charliecloud import CharliecloudRunner

        yield CharliecloudRunner(engine)
    else:
        from imagekit.adapters.containers import ContainerProbeRunner

        yield ContainerProbeRunner(engine)
