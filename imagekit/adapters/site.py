"""Adapter: writes the run page (`imagekit report --html DIR`), a static site, from a results
folder: the pages site/html.py renders, and a copy of the records, logs and reports they
link to under raw/<run-id>/, so the folder is complete on its own (an artifact, GitHub Pages).
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

from imagekit.adapters.results import read_runs, results_key, write_atomic
from imagekit.errors import InputError
from imagekit.site.html import INDEX, render_site
from imagekit.site.page import site_model

# A longer log is cut to its end (where a failure is) so that the site stays small: a CUDA
# build log of a 27-image matrix would otherwise make it tens of MB.
LOG_LIMIT_BYTES = 256 * 1024


def write_site(results_dir: Path, out: Path, threshold: float = 0.2) -> Path:
    """Write the site of every run under `results_dir` into `out` (its old pages replaced);
    the path of its index.html. InputError when there is no run to show."""
    runs = read_runs(results_dir, results_key())
    if not any(run.images for run in runs):
        raise InputError(f"no runs under {results_dir}", "run imagekit build or verify first")
    site = site_model(runs, threshold, dt.datetime.now(dt.UTC).date())
    for stale in ("image", "raw"):
        shutil.rmtree(out / stale, ignore_errors=True)
    for path, text in render_site(site).items():
        write_atomic(out / path, text)
    for name in site.files:
        _copy(results_dir / name, out / "raw" / name)
    return out / INDEX


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    size = source.stat().st_size
    if source.suffix != ".log" or size <= LOG_LIMIT_BYTES:
        shutil.copyfile(source, target)
        return
    with source.open("rb") as handle:
        handle.seek(size - LOG_LIMIT_BYTES)
        tail = handle.read().decode("utf-8", "replace")
    cut = f"[imagekit report --html: the first {size - LOG_LIMIT_BYTES} bytes are left out]\n"
    write_atomic(target, cut + tail)
