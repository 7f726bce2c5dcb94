"""The grid of the run page: one row per image, one column per level, probe and inspection,
each cell's state in words. Pure; site/page.py puts the rows together with the pages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from imagekit.kernel.publish_records import PublishRecord
from imagekit.kernel.records import LEVELS, BuildRecord, Check, LevelState, Status, VerifyRecord


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
    PUBLISH = "publish"


@dataclass(frozen=True)
class Column:
    kind: ColumnKind
    name: str

    @property
    def solo(self) -> bool:
        """A group of its own (verdict, publish): one heading says it."""
        return self.kind in (ColumnKind.VERDICT, ColumnKind.PUBLISH)


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
    columns: Sequence[Column], verify: VerifyRecord | None, size: Size, pubs: Sequence[Publication]
) -> tuple[Cell, ...]:
    """One image's row: a cell per column, from its newest verify record, size, and its
    publish records (newest first)."""
    cells = []
    for column in columns:
        if column.name == "size":
            cells.append(_size_cell(column, size))
        elif column.kind is ColumnKind.PUBLISH:
            cells.append(_publish_cell(column, pubs))
        elif verify is None:
            cells.append(Cell(column, CellState.NOT_RUN, "not verified"))
        else:
            cells.append(_verify_cell(column, verify))
    return tuple(cells)
