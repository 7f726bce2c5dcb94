"""The figures people watch across runs, as series, and their charts' geometry. Pure.

One series per image and figure (matmul warm ms, TFLOP/s, compile seconds, `import torch`
seconds, build seconds, image bytes, pending security fixes): one point per run that recorded
the figure, oldest first.
A run that did not record a figure adds no point, so a missing figure is absent, never zero.
The charts are SVG drawn on the server (site/html.py): this module computes where each
point goes, so the geometry is unit-tested and the page needs no script to draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from imagekit.kernel.records import AuditRecord, BuildRecord, BuildStatus, VerifyRecord
from imagekit.verify.summary import HIGHER_IS_BETTER, Change


class Source(StrEnum):
    """Where a figure is read: a probe's metric in a verify record, a build record, or an
    audit record."""

    PROBE = "probe"
    BUILD = "build"
    AUDIT = "audit"


@dataclass(frozen=True)
class Figure:
    """One watched figure: its label and unit, and where it is read (`probe` and `metric`:
    the probe's metric; for a build figure, `metric` is the build record's field)."""

    label: str
    unit: str
    source: Source
    metric: str
    probe: str = ""

    @property
    def higher_is_better(self) -> bool:
        """TFLOP/s and bandwidths; for times and sizes, smaller is better."""
        return self.metric.endswith(HIGHER_IS_BETTER)


MATMUL_WARM = Figure("matmul warm", "ms", Source.PROBE, "matmul_warm_median_ms", "matmul")
# Stands for every `gemm_<dtype>_tflops` of the matmul probe (GPU runs only); one series each.
MATMUL_TFLOPS = Figure("matmul", "TFLOP/s", Source.PROBE, "_tflops", "matmul")
FIRST_COMPILE = Figure("first compile", "s", Source.PROBE, "first_compile_s", "compile")
# No probe records it yet: the series stays empty and the page says "not recorded".
IMPORT_TORCH = Figure("import torch", "s", Source.PROBE, "import_torch_s", "env")
# Of a build that built: an up-to-date image's "build" is a label lookup, not a build.
BUILD_TIME = Figure("build", "s", Source.BUILD, "duration_s")
IMAGE_SIZE = Figure("image size", "bytes", Source.BUILD, "size_bytes")
# The security fixes an image lacked when it was audited: what a rebuild would take.
PENDING_FIXES = Figure("security", "pending fixes", Source.AUDIT, "pending_fixes")
WATCHED: tuple[Figure, ...] = (
    MATMUL_WARM,
    MATMUL_TFLOPS,
    FIRST_COMPILE,
    IMPORT_TORCH,
    BUILD_TIME,
    IMAGE_SIZE,
    PENDING_FIXES,
)


@dataclass(frozen=True)
class Sparkline:
    """Where a series' points go in a `width` x `height` SVG: `points`, the polyline's
    attribute ("" for one value: a dot alone says it all), and `dots`, one (x, y) per value.
    A larger value is drawn higher."""

    width: int
    height: int
    points: str
    dots: tuple[tuple[float, float], ...]


def sparkline(values: Sequence[float], width: int = 180, height: int = 40) -> Sparkline:
    """The geometry of `values` (at least one), oldest first, spread evenly across `width`
    with a margin of 5 units; equal values lie on the middle line."""
    if not values:
        raise ValueError("a sparkline needs at least one value")
    pad = 5.0
    low, high = min(values), max(values)
    step = (width - 2 * pad) / (len(values) - 1) if len(values) > 1 else 0.0

    def y(value: float) -> float:
        if high == low:
            return height / 2
        return pad + (high - value) / (high - low) * (height - 2 * pad)

    dots = tuple(
        (round(pad + i * step if len(values) > 1 else width / 2, 1), round(y(v), 1))
        for i, v in enumerate(values)
    )
    points = " ".join(f"{x:g},{y_:g}" for x, y_ in dots) if len(dots) > 1 else ""
    return Sparkline(width, height, points, dots)


@dataclass(frozen=True)
class Point:
    """A figure's value in one run."""

    run_id: str
    value: float


def figure_text(value: float, unit: str) -> str:
    """A figure as people read it, with its unit: "1.84 GB", "163 ms", "21.3 s", "0.779"."""
    if unit == "bytes":
        return f"{value / 1e9:.2f} GB" if value >= 1e8 else f"{value / 1e6:.1f} MB"
    number = f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return f"{number} {unit}".strip()


@dataclass(frozen=True)
class Series:
    """One figure of one image across runs. `change`: the regression of its latest point
    (the line `report RUN RUN2` prints), or None."""

    figure: Figure
    points: tuple[Point, ...]
    change: Change | None = None

    @property
    def latest(self) -> Point | None:
        return self.points[-1] if self.points else None

    def text(self, point: Point) -> str:
        """One point's value with the figure's unit."""
        return figure_text(point.value, self.figure.unit)

    @property
    def chart(self) -> Sparkline | None:
        """The chart's geometry; None when no run recorded the figure."""
        return sparkline([p.value for p in self.points]) if self.points else None


# The records of one image in one run, oldest run first: what a series is read from.
Sighting = tuple[str, BuildRecord | None, VerifyRecord | None, AuditRecord | None]


def _probe_metrics(verify: VerifyRecord | None, probe: str) -> dict[str, float]:
    result = verify.result(probe) if verify else None
    return dict(result.metrics) if result else {}


def _value(figure: Figure, sighting: Sighting) -> float | None:
    _, build, verify, audit = sighting
    if figure.source is Source.AUDIT:
        return float(len(audit.pending_fixes)) if audit is not None else None
    if figure.source is Source.PROBE:
        return _probe_metrics(verify, figure.probe).get(figure.metric)
    if build is None or (figure is BUILD_TIME and build.status is not BuildStatus.BUILT):
        return None
    value = getattr(build, figure.metric)
    return float(value) if value is not None else None


def _figures(sightings: Sequence[Sighting]) -> list[Figure]:
    """WATCHED, the TFLOP/s entry expanded to each `*_tflops` metric the matmul probe
    recorded (left as it is when it recorded none, to be shown as not recorded)."""
    tflops = sorted(
        {
            metric
            for _, _, verify, _ in sightings
            for metric in _probe_metrics(verify, MATMUL_TFLOPS.probe)
            if metric.endswith(MATMUL_TFLOPS.metric)
        }
    )
    figures: list[Figure] = []
    for figure in WATCHED:
        if figure is MATMUL_TFLOPS and tflops:
            figures += [
                Figure(f"matmul {m.removeprefix('gemm_').removesuffix('_tflops')}", "TFLOP/s",
                       Source.PROBE, m, MATMUL_TFLOPS.probe)
                for m in tflops
            ]  # fmt: skip
        else:
            figures.append(figure)
    return figures


def image_series(sightings: Sequence[Sighting], latest: Sequence[Change]) -> tuple[Series, ...]:
    """Every watched figure of one image across its runs; `latest`: the regressions of its
    newest verify record against the one before, each marked on the series it is about."""
    found = []
    for figure in _figures(sightings):
        points = []
        for sighting in sightings:
            value = _value(figure, sighting)
            if value is not None:
                points.append(Point(sighting[0], value))
        change = next(
            (c for c in latest if c.probe == figure.probe and c.metric == figure.metric), None
        )
        found.append(Series(figure, tuple(points), change if figure.probe else None))
    return tuple(found)
