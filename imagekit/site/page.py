"""The run as a page (`imagekit report --html DIR`), as data. Pure.

Records in, a typed view model out: the matrix as a grid (one row per image; its verdict, the
state of each level, each probe and each inspection), each image's page (versions seen inside,
checks, figures, size against its budget, largest layers, the tags publish gave it and its
attestation, links to the raw files), and the watched figures across runs
(site/history.py), with the regressions `report RUN RUN2` computes. The HTML is
site/html.py's, reading and writing files adapters/site.py's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from imagekit.kernel import labels as L
from imagekit.kernel.publish_records import PublishRecord
from imagekit.kernel.records import BuildRecord, ImageRecord, LayerSize, VerifyRecord
from imagekit.site.grid import (
    Cell,
    CellState,
    Column,
    ColumnKind,
    Publication,
    Security,
    Size,
    cells_of,
    columns_of,
    size_of,
)
from imagekit.site.history import Series, Sighting, image_series
from imagekit.verify.agreement import glibc_floor_met
from imagekit.verify.summary import Change, level_text, platform_text, regressions


@dataclass(frozen=True)
class RunRecords:
    """One run folder as the site reads it (adapters/results.py `read_runs`): its records,
    `publish.json`'s, and `files`, the small files it holds (relative to it: images/X.json,
    logs/X.build.log, junit.xml ...) that pages may link to. `seal_problems`: why an image's
    verify seal does not hold (absent: it holds)."""

    run_id: str
    command: str = ""
    host: str = ""
    images: Mapping[str, ImageRecord] = field(default_factory=dict)
    publish: tuple[PublishRecord, ...] = ()
    files: frozenset[str] = frozenset()
    seal_problems: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Link:
    label: str
    href: str  # relative to the site's root


@dataclass(frozen=True)
class ImagePage:
    """One image: its row of the grid (`cells`, one per column of the site) and everything its
    own page shows. `verify` is its newest verify record; `build` the build of that very image
    id (else its newest build); `publications` its publish records, newest first."""

    name: str
    cell: str
    flavour: str
    platform: str
    cells: tuple[Cell, ...]
    verify: VerifyRecord | None
    verify_run: str
    verify_runs: int
    build: BuildRecord | None
    build_run: str
    seal: str
    publications: tuple[Publication, ...]
    security: Security
    history: tuple[Series, ...]
    regressions: tuple[Change, ...]
    links: tuple[Link, ...]

    @property
    def href(self) -> str:
        return f"image/{self.name}.html"

    @property
    def verdict(self) -> Cell:
        return self.cells[0]

    @property
    def states(self) -> str:
        """The states of its cells, for the state filter ("na not-run pass skip")."""
        return " ".join(sorted({c.state.css for c in self.cells}))

    @property
    def level(self) -> str:
        return level_text(self.verify) if self.verify else "not verified"

    @property
    def where(self) -> str:
        """Where its probes ran: the platform, and the emulated CPU if any."""
        return platform_text(self.verify) if self.verify else self.platform

    @property
    def versions(self) -> tuple[tuple[str, str, str], ...]:
        """(what, seen inside by the env probe, what its label says), where either is known.
        glibc's label is a floor, not a version to equal: its cell says whether the glibc seen
        meets it."""
        facts = self.verify.env_facts if self.verify else {}
        labels = self.verify.labels if self.verify else {}
        keys = (("torch", L.TORCH), ("python", L.PYTHON), ("cuda", L.CUDA), ("cudnn", L.CUDNN),
                ("nccl", L.NCCL), ("glibc", L.GLIBC_FLOOR))  # fmt: skip
        return tuple(
            (
                key,
                str(facts.get(key) or "none"),
                _label_text(key, facts.get(key), labels.get(label)),
            )
            for key, label in keys
            if key in facts or label in labels
        )

    @property
    def size(self) -> Size:
        return size_of(self.build, self.verify)

    @property
    def layers(self) -> tuple[LayerSize, ...]:
        # A layer of metadata (LABEL, ENV) weighs nothing: it is no answer to "what is big".
        return tuple(x for x in self.build.largest_layers if x.size_bytes) if self.build else ()

    @property
    def signed(self) -> Publication | None:
        """Its newest publication that signed and attested the digest."""
        return next((p for p in self.publications if p.record.signed_digest), None)

    @property
    def problems(self) -> tuple[str, ...]:
        """Why it did not pass or was refused: failed probes and checks, the build's message,
        publish's reasons."""
        found: list[str] = []
        if self.build is not None and not self.build.ok:
            found.append(f"build {self.build.status}: {self.build.message}")
        if self.verify is not None:
            for r in self.verify.probes:
                if r.status.bad:
                    found.append(f"probe {r.probe} {r.status}: {r.reason or 'no reason given'}")
                    found += [f"probe {r.probe}: {c.name}: {c.detail}" for c in r.failed_checks]
            found += [f"{c.name}: {c.detail}" for c in self.verify.inspection if not c.ok]
        if self.seal:
            found.append(f"seal: {self.seal}")
        return tuple(found)


def _label_text(key: str, seen: object, said: str | None) -> str:
    """What a label says, for the versions table ("-" where there is none). glibc's is the floor
    it is: `>= 2.28, met`, or `not met` where the image's glibc is older."""
    if said is None or key != "glibc":
        return "-" if said is None else said
    met = glibc_floor_met(seen, said)
    return f">= {said}" if met is None else f">= {said}, {'met' if met else 'not met'}"


GROUP_HEADINGS = {
    ColumnKind.VERDICT: "verdict",
    ColumnKind.LEVEL: "levels",
    ColumnKind.PROBE: "probes",
    ColumnKind.INSPECTION: "inspection",
    ColumnKind.SECURITY: "security",
    ColumnKind.PUBLISH: "publish",
}


@dataclass(frozen=True)
class Site:
    """The whole site: the runs it was made from, the grid's columns, one page per image (its
    row with it), and what got worse in each image's newest verify run."""

    runs: tuple[RunRecords, ...]
    columns: tuple[Column, ...]
    pages: tuple[ImagePage, ...]
    threshold: float

    @property
    def regressions(self) -> tuple[Change, ...]:
        return tuple(c for p in self.pages for c in p.regressions)

    @property
    def compared(self) -> int:
        """How many images have two verify runs or more (what regressions compare)."""
        return sum(1 for p in self.pages if p.verify_runs > 1)

    @property
    def groups(self) -> tuple[tuple[str, int], ...]:
        """The grid's column groups, left to right: (heading, how many columns); a solo
        column's heading is its group's."""
        found: list[tuple[str, int]] = []
        for column in self.columns:
            heading = GROUP_HEADINGS[column.kind]
            if found and found[-1][0] == heading:
                found[-1] = (heading, found[-1][1] + 1)
            else:
                found.append((heading, 1))
        return tuple(found)

    def choices(self, facet: str) -> tuple[str, ...]:
        """What a filter offers: the values of `cell`, `flavour` or `platform`, or `states`."""
        if facet == "states":
            seen = {s for p in self.pages for s in p.states.split()}
            return tuple(s.css for s in CellState if s.css in seen)
        return tuple(sorted({getattr(p, facet) for p in self.pages}))

    @property
    def files(self) -> tuple[str, ...]:
        """`run-id/path` of every file of a run folder a page links to (the writer copies
        them under raw/)."""
        return tuple(sorted({k.href.removeprefix("raw/") for p in self.pages for k in p.links}))

    @property
    def verdicts(self) -> tuple[tuple[CellState, int], ...]:
        """How many images passed, failed, were not verified."""
        states = [p.verdict.state for p in self.pages]
        return tuple((s, states.count(s)) for s in CellState if s in states)


def _links(name: str, runs: Sequence[RunRecords]) -> tuple[Link, ...]:
    """The raw files of `name` in each run, newest run first: records, logs, reports."""
    links = []
    for run in reversed(runs):
        if name not in run.images and not any(p.name == name for p in run.publish):
            continue
        wanted = [
            (f"images/{name}.json", f"{run.command or 'run'} record"),
            *((f"logs/{name}.{stage}.log", f"{stage} log") for stage in ("build", "verify")),
            ("publish.json", "publish.json"),
            ("junit.xml", "junit.xml"),
            ("summary.md", "summary.md"),
            ("run.json", "run.json"),
        ]
        links += [
            Link(f"{run.run_id}: {label}", f"raw/{run.run_id}/{path}")
            for path, label in wanted
            if path in run.files
        ]
    return tuple(links)


def _run_day(run_id: str) -> dt.date | None:
    """The day a run began, from its id (`20261207T153012Z-ab12`); None for another name."""
    try:
        return dt.datetime.strptime(run_id[:8], "%Y%m%d").date()
    except ValueError:
        return None


def _security(
    records: Sequence[tuple[RunRecords, ImageRecord]],
    image_id: str | None,
    build_run: str,
    today: dt.date,
) -> Security:
    """The newest audit of the image the page shows (`image_id`: an audit of an image built
    before it says nothing of it), and its age and the build's, counted to `today`; and the
    newest audit of another image of the name that lacked fixes (what a patch replaced)."""
    built = _run_day(build_run)
    since_build = (today - built).days if built else None
    audits = [(run, r.audit) for run, r in records if r.audit and r.audit.image_id == image_id]
    stale = [
        (run.run_id, r.audit)
        for run, r in records
        if r.audit and r.audit.image_id != image_id and r.audit.pending_fixes
    ]
    before_run, before = stale[-1] if stale else ("", None)
    if not audits:
        return Security(days_since_build=since_build, before=before, before_run=before_run)
    run, audit = audits[-1]
    audited = dt.datetime.fromisoformat(audit.audited_at).date()
    days = (today - audited).days
    return Security(audit, run.run_id, days, since_build, before, before_run)


def _page(
    name: str,
    runs: Sequence[RunRecords],
    columns: Sequence[Column],
    threshold: float,
    today: dt.date,
) -> ImagePage:
    records = [(run, run.images[name]) for run in runs if name in run.images]
    verifies = [(run, r.verify) for run, r in records if r.verify is not None]
    builds = [(run, r.build) for run, r in records if r.build is not None]
    plans = [r.plan for _, r in records if r.plan is not None]
    verify_run, verify = verifies[-1] if verifies else (None, None)
    mine = [(run, b) for run, b in builds if verify is not None and b.image_id == verify.image_id]
    build_run, build = (mine or builds)[-1] if builds else (None, None)
    pubs = tuple(
        Publication(run.run_id, run.host, p)
        for run in reversed(runs)
        for p in run.publish
        if p.name == name
    )
    changes: list[Change] = []
    if len(verifies) > 1:
        (_, was), (_, now) = verifies[-2:]
        changes = regressions(
            {name: ImageRecord(verify=was)}, {name: ImageRecord(verify=now)}, threshold
        )
    sightings: list[Sighting] = [(run.run_id, r.build, r.verify, r.audit) for run, r in records]
    shown = verify.image_id if verify else build.image_id if build else None
    security = _security(records, shown, build_run.run_id if build_run else "", today)
    labels = verify.labels if verify else {}
    plan = plans[-1] if plans else None
    return ImagePage(
        name=name,
        cell=labels.get(L.CELL) or (str(plan.cell.get("id", "")) if plan else ""),
        flavour=labels.get(L.FLAVOUR) or (plan.flavour if plan else ""),
        platform=(verify.platform if verify else "") or labels.get(L.PLATFORM, ""),
        cells=cells_of(columns, verify, size_of(build, verify), pubs, security),
        verify=verify,
        verify_run=verify_run.run_id if verify_run else "",
        verify_runs=len(verifies),
        build=build,
        build_run=build_run.run_id if build_run else "",
        seal=verify_run.seal_problems.get(name, "") if verify_run else "",
        publications=pubs,
        security=security,
        history=image_series(sightings, changes),
        regressions=tuple(changes),
        links=_links(name, runs),
    )


def site_model(
    runs: Sequence[RunRecords], threshold: float = 0.2, today: dt.date | None = None
) -> Site:
    """The site of every image recorded in `runs` (any order): built, verified, audited.
    `threshold`: how much worse a metric must get to count as a regression (a fraction, as
    `imagekit report --threshold`); `today`: the day ages are counted to (default: the newest
    run's)."""
    ordered = tuple(sorted(runs, key=lambda r: r.run_id))
    names = sorted({name for run in ordered for name in run.images})
    newest = {name: r.verify for run in ordered for name, r in run.images.items() if r.verify}
    columns = columns_of([newest[n] for n in names if n in newest])
    day = today or (_run_day(ordered[-1].run_id) if ordered else None) or dt.date(1970, 1, 1)
    pages = tuple(_page(name, ordered, columns, threshold, day) for name in names)
    return Site(ordered, columns, pages, threshold)
