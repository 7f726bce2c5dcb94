"""Adapter: the engine and run folder a verify works in, opened in the order that keeps bad
input ahead of any record: the results folder checked, then the engine opened and asked
whatever the caller checks (that it holds the images), and only then the run folder made (a
verify of images the engine lacks leaves no folder)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from imagekit.adapters import engine as docker
from imagekit.adapters.engine import DockerEngine
from imagekit.adapters.results import RunFacts, RunFolder, results_key


def open_verify_run(
    results: Path, images: Sequence[str], checks: Sequence[Callable[[DockerEngine], None]]
) -> tuple[DockerEngine, RunFolder]:
    """The engine, once each of `checks` has passed on it, and the run folder of `images`, its
    run.json written and its records sealed with IMAGEKIT_RESULTS_KEY when that is set."""
    RunFolder.check_writable(results)
    engine = docker.open_engine()
    for check in checks:
        check(engine)
    key = results_key()
    facts = RunFacts(images=list(images), sealed_with_key=key is not None)
    return engine, RunFolder.begin(results, "verify", engine.info(), facts, seal_key=key)
