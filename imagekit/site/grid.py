"""The grid of the run page: one row per image, one column per level, probe and inspection,
each cell's state in words. Pure; site/page.py puts the rows together with the pages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from imagekit.kernel.publish_records import PublishRecord
from imagekit.kernel.records import (
    LEVELS,
    AuditRecord,
    BuildRecord,
    Check,
    LevelState,
    Status,
    Verdict,
    VerifyRecord,
)


class CellState(StrEnum):
    """The state a cell of the grid shows, in words (the page is readable without colour)."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    TIMEOUT = "timeout"
    SKIP = "skip"
    NOT_RUN = "not run"
    NOT_APPLICABLE = "n/a"

    @property
    def bad(self) -> bool:
        return self in (CellState.FAIL, CellState.ERROR, CellState.TIMEOUT)

    @property
    def css(self) -> str:
        """The state's class name in the page ("not-run", "na")."""
        return {CellState.NOT_RUN: "not-run", CellState.NOT_APPLICABLE: "na"}.get(self, self.value)


OF_STATUS = {s: CellState(s.value) for s in Status}
OF_LEVEL = {
    LevelState.PASS: CellState.PASS,
    LevelState.FAIL: CellState.FAIL,
    LevelState.NOT_RUN: CellState.NOT_RUN,
    LevelState.NOT_APPLICABLE: CellState.NOT_APPLICABLE,
}


class ColumnKind(StrEnum):
    """The groups of the grid's columns, left to right."""

    VERDICT = "verdict"
    LEVEL = "level"
    PROBE = "probe"
    INSPECTION = "inspection"
    SECURITY = "security"
    PUBLISH = "publish"


@dataclass(frozen=True)
class Column:
    kind: ColumnKind
    name: str

    @property
    def solo(self) -> bool:
        """A group of its own (verdict, publish): one heading says it."""
        return self.kind in (ColumnKind.VERDICT, ColumnKind.SECURITY, ColumnKind.PUBLISH)


@dataclass(frozen=True)
class Cell:
    """One image x column: its state, the words shown, and the detail shown on hover."""

    column: Column
    state: CellState
    text: str
    detail: str = ""


@dataclass(frozen=True)
class Size:
    """An image's size against its budget (either may be unknown)."""

    size_bytes: int | None
    budget_bytes: int | None

    @property
    def over(self) -> bool:
        return bool(self.size_bytes and self.budget_bytes and self.size_bytes > self.budget_bytes)

    @property
    def percent(self) -> int | None:
        """The size as a percentage of the budget (None without both)."""
        if not (self.size_bytes and self.budget_bytes):
            return None
        return round(100 * self.size_bytes / self.budget_bytes)

    @property
    def text(self) -> str:
        size = f"{self.size_bytes / 1e9:.2f} GB" if self.size_bytes else "size unknown"
        if not self.budget_bytes:
            return f"{size}, no budget"
        return f"{size} of {self.budget_bytes / 1e9:.2f} GB ({self.percent}%)"


@dataclass(frozen=True)
class Publication:
    """What one publish run did with the image: its tags, refusal reasons, and signature."""

    run_id: str
    host: str
    record: PublishRecord


def columns_of(verified: Sequence[VerifyRecord]) -> tuple[Column, ...]:
    """The grid's columns: the verdict, each level, every probe any image ran (in the order
    they ran), the inspections and publish."""
    probes: list[str] = []
    for verify in verified:
        probes += [r.probe for r in verify.probes if r.probe not in probes]
    return (
        Column(ColumnKind.VERDICT, "verdict"),
        *(Column(ColumnKind.LEVEL, level.value) for level in LEVELS),
        *(Column(ColumnKind.PROBE, p) for p in probes),
        Column(ColumnKind.INSPECTION, "structure"),
        Column(ColumnKind.INSPECTION, "labels"),
        Column(ColumnKind.INSPECTION, "size"),
        Column(ColumnKind.SECURITY, "security"),
        Column(ColumnKind.PUBLISH, "publish"),
    )


def size_of(build: BuildRecord | None, verify: VerifyRecord | None) -> Size:
    """The size the build measured (else the one verify saw) and the build's budget."""
    built = build.size_bytes if build else None
    seen = verify.size_bytes if verify else 0
    return Size(built or seen or None, build.size_budget_bytes if build else None)


def _checks_cell(column: Column, checks: Sequence[Check]) -> Cell:
    if not checks:
        return Cell(column, CellState.NOT_RUN, "not run")
    failed = [c for c in checks if not c.ok]
    if failed:
        detail = "; ".join(f"{c.name}: {c.detail}" for c in failed)
        return Cell(column, CellState.FAIL, f"{len(failed)} of {len(checks)} failed", detail)
    return Cell(column, CellState.PASS, f"{len(checks)} ok")


def _size_cell(column: Column, size: Size) -> Cell:
    if size.size_bytes is None:
        return Cell(column, CellState.NOT_RUN, "unknown")
    short = f"{size.size_bytes / 1e9:.2f} GB"
    if size.budget_bytes is None:
        return Cell(column, CellState.NOT_APPLICABLE, short, "no size budget")
    state = CellState.FAIL if size.over else CellState.PASS
    return Cell(column, state, f"{short} ({size.percent}%)", size.text)


@dataclass(frozen=True)
class Security:
    """An image's newest audit (None: never audited) and the days since it and since the image
    was built (the last patch), counted to the day the page is made."""

    audit: AuditRecord | None = None
    audit_run: str = ""
    days_since_audit: int | None = None
    days_since_build: int | None = None
    # The newest audit of another image of this name that lacked fixes (the published tag a
    # patch replaces), and its run: what the rebuild changed.
    before: AuditRecord | None = None
    before_run: str = ""

    @property
    def ages(self) -> str:
        """ "audited 3 days ago, built 10 days ago", as far as known."""
        parts = []
        if self.days_since_audit is not None:
            parts.append(f"audited {_days(self.days_since_audit)}")
        if self.days_since_build is not None:
            parts.append(f"built {_days(self.days_since_build)}")
        return ", ".join(parts)


def _days(days: int) -> str:
    return "today" if days <= 0 else "1 day ago" if days == 1 else f"{days} days ago"


def _security_cell(column: Column, security: Security) -> Cell:
    audit = security.audit
    if audit is None:
        return Cell(column, CellState.NOT_RUN, "not audited")
    state = CellState.PASS if audit.status is Verdict.PASS else CellState.FAIL
    index = f"{audit.security_index.suite} of {audit.security_index.date}"
    fixes = [f"{f.package} {f.installed} -> {f.fixed}" for f in audit.pending_fixes]
    detail = "; ".join([f"run {security.audit_run}", security.ages, index, *fixes])
    short = f"{len(audit.pending_fixes)} pending"
    if audit.unsupported:
        # Past its release's end of patch: nothing rebuilds it, whatever it lacks.
        short += f", unsupported since {audit.end_of_patch}"
    return Cell(column, state, short, detail)


def _publish_cell(column: Column, publications: Sequence[Publication]) -> Cell:
    if not publications:
        return Cell(column, CellState.NOT_RUN, "not run")
    newest = publications[0]
    record = newest.record
    state = CellState.PASS if record.status.ok else CellState.FAIL
    signed = ", signed" if record.signed_digest else ""
    detail = "; ".join([f"run {newest.run_id}", *record.reasons])
    return Cell(column, state, f"{record.status}{signed}", detail)


def _verify_cell(column: Column, verify: VerifyRecord) -> Cell:
    if column.kind is ColumnKind.VERDICT:
        return Cell(column, CellState(verify.status.value), verify.status, f"level {verify.level}")
    if column.kind is ColumnKind.LEVEL:
        level = next(x for x in LEVELS if x.value == column.name)
        state = OF_LEVEL[verify.levels.get(level, LevelState.NOT_RUN)]
        return Cell(column, state, state.value)
    if column.kind is ColumnKind.PROBE:
        result = verify.result(column.name)
        if result is None:
            return Cell(column, CellState.NOT_RUN, "not run", "this probe did not run here")
        return Cell(column, OF_STATUS[result.status], result.status, result.reason)
    checks = verify.structure if column.name == "structure" else verify.labels_agree
    return _checks_cell(column, checks)


def cells_of(
    columns: Sequence[Column],
    verify: VerifyRecord | None,
    size: Size,
    pubs: Sequence[Publication],
    security: Security,
) -> tuple[Cell, ...]:
    """One image's row: a cell per column, from its newest verify record, size, its publish
    records (newest first) and its newest audit."""
    cells = []
    for column in columns:
        if column.name == "size":
            cells.append(_size_cell(column, size))
        elif column.kind is ColumnKind.SECURITY:
            cells.append(_security_cell(column, security))
        elif column.kind is ColumnKind.PUBLISH:
            cells.append(_publish_cell(column, pubs))
        elif verify is None:
            cells.append(Cell(column, CellState.NOT_RUN, "not verified"))
        else:
            cells.append(_verify_cell(column, verify))
    return tuple(cells)
