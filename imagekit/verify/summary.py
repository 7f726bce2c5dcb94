"""Reports of verify results (pure): the Markdown summary, JUnit XML, and run-to-run changes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagekit.kernel.records import (
    LEVELS,
    ImageRecord,
    LevelState,
    ProbeResult,
    Status,
    VerifyRecord,
)
from imagekit.verify.levels import rank

# GitHub Actions' step summary: the file a job's page shows, where verify adds its summary.
STEP_SUMMARY = "GITHUB_STEP_SUMMARY"
# Metrics where a larger number is better; for the rest (times), smaller is better.
HIGHER_IS_BETTER = ("_tflops", "_gbps")
STATUS_MARKS = {
    Status.PASS: "pass",
    Status.FAIL: "FAIL",
    Status.ERROR: "ERROR",
    Status.TIMEOUT: "TIMEOUT",
    Status.SKIP: "skip",
}
LEVEL_MARKS = {
    LevelState.PASS: "ok",
    LevelState.FAIL: "FAIL",
    LevelState.NOT_RUN: "-",
    LevelState.NOT_APPLICABLE: "n/a",
}
Records = Mapping[str, ImageRecord]


def level_text(verify: VerifyRecord) -> str:
    """ "cpu (static ok, cpu ok, gpu -)": the level reached and the state of each level."""
    if not verify.levels:
        return verify.level
    marks = ", ".join(
        f"{level} {LEVEL_MARKS[verify.levels[level]]}" for level in LEVELS if level in verify.levels
    )
    return f"{verify.level} ({marks})"


def platform_text(verify: VerifyRecord) -> str:
    """ "linux/arm64 (emulated neoverse-n2)": where the probes ran, and on which emulated CPU;
    "linux/amd64 under charliecloud" for an HPC runtime; "-" when the engine did not say."""
    platform = verify.platform or "-"
    if verify.runtime.exported:
        platform += f" under {verify.runtime}"
    if not verify.emulated:
        return platform
    cpu = f" {verify.emulated_cpu}" if verify.emulated_cpu else ""
    return f"{platform} (emulated{cpu})"


def _verified(records: Records) -> dict[str, VerifyRecord]:
    return {name: r.verify for name, r in sorted(records.items()) if r.verify is not None}


def run_summary(records: Records, width: int) -> str:
    """What `report` shows of one run, in `width` columns: the verify table, or for a run
    that verified nothing (a build run), its build table (a header alone said nothing)."""
    from imagekit.kernel.text import build_table, fitted

    builds = [r.build for r in records.values() if r.build is not None]
    if builds and not any(r.verify for r in records.values()):
        return build_table(builds)
    return fitted(*summary_rows(records), width=width)


def summary_rows(records: Records) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per verified image, one column per probe."""
    verified = _verified(records)
    probes: list[str] = []
    for verify in verified.values():
        probes += [r.probe for r in verify.probes if r.probe not in probes]
    header = ["image", "platform", "level", "status", *probes, "inspection", "matmul warm ms"]
    rows = []
    for name, verify in verified.items():
        failed = [c for c in verify.inspection if not c.ok]
        metric = next(
            (
                r.metrics["matmul_warm_median_ms"]
                for r in verify.probes
                if "matmul_warm_median_ms" in r.metrics
            ),
            None,
        )
        cells = [STATUS_MARKS[r.status] if r else "-" for r in map(verify.result, probes)]
        rows.append(
            [
                name,
                platform_text(verify),
                level_text(verify),
                verify.status,
                *cells,
                ("ok" if not failed else f"{len(failed)} FAILED") if verify.inspection else "-",
                f"{metric:.1f}" if metric is not None else "-",
            ]
        )
    return header, rows


def _problem_lines(name: str, verify: VerifyRecord) -> list[str]:
    lines = []
    for result in verify.probes:
        if result.status.bad:
            detail = "; ".join(f"{c.name}: {c.detail}" for c in result.failed_checks)
            lines.append(
                f"- **{name}** `{result.probe}` {result.status}: "
                f"{result.reason}{' (' + detail + ')' if detail else ''}"
            )
    for kind, checks in (("structure", verify.structure), ("labels", verify.labels_agree)):
        lines += [f"- **{name}** {kind}: {c.name}: {c.detail}" for c in checks if not c.ok]
    return lines


def markdown(records: Records, run_id: str, errors: Mapping[str, str] | None = None) -> str:
    """summary.md: a table people read, then the reasons of everything that did not pass.
    `errors`: images that could not be verified (the engine refused, the image is missing)."""
    header, rows = summary_rows(records)
    lines = [f"## imagekit verify, run {run_id}", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    problems = [line for n, v in _verified(records).items() for line in _problem_lines(n, v)]
    problems += [f"- **{n}** not verified: {why}" for n, why in sorted((errors or {}).items())]
    if not _verified(records):
        problems.append("- nothing was verified")
    if problems:
        lines += ["", "### Problems", "", *problems]
    return "\n".join(lines) + "\n"


def _probe_case(suite: ET.Element, name: str, result: ProbeResult, counts: dict[str, int]) -> None:
    case = ET.SubElement(
        suite, "testcase", classname=name, name=result.probe, time=f"{result.duration_s:.3f}"
    )
    counts["tests"] += 1
    if result.status is Status.FAIL:
        counts["failures"] += 1
        failed = [f"{c.name}: {c.detail}" for c in result.failed_checks]
        ET.SubElement(case, "failure", message=result.reason).text = "\n".join(failed)
    elif result.status in (Status.ERROR, Status.TIMEOUT):
        counts["errors"] += 1
        ET.SubElement(case, "error", message=f"{result.status}: {result.reason}")
    elif result.status is Status.SKIP:
        counts["skipped"] += 1
        ET.SubElement(case, "skipped", message=result.reason)


def step_summary_file(environ: Mapping[str, str]) -> Path | None:
    """GitHub Actions' step summary file, when the job gives one (`VerifyRun.execute` adds
    the run's summary to it)."""
    value = environ.get(STEP_SUMMARY)
    return Path(value) if value else None


def junit(records: Records, run_id: str, errors: Mapping[str, str] | None = None) -> str:
    """junit.xml: one testcase per image x probe, plus one per image for the structure checks
    and one for the label checks. An image that could not be verified (`errors`) is a testcase
    in error, and a run that verified nothing is never an empty, green suite."""
    suite = ET.Element("testsuite", name=f"imagekit verify {run_id}")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_s = 0.0
    for name, why in sorted((errors or {}).items()):
        case = ET.SubElement(suite, "testcase", classname=name, name="verify")
        counts["tests"] += 1
        counts["errors"] += 1
        ET.SubElement(case, "error", message=f"not verified: {why}")
    if not _verified(records) and not errors:
        case = ET.SubElement(suite, "testcase", classname="imagekit", name="verify")
        counts["tests"] += 1
        counts["errors"] += 1
        ET.SubElement(case, "error", message="nothing was verified in this run")
    for name, verify in _verified(records).items():
        for result in verify.probes:
            _probe_case(suite, name, result, counts)
            total_s += result.duration_s
        for kind, checks in (
            ("structure", verify.structure),
            ("labels_agree", verify.labels_agree),
        ):
            if not checks:
                continue
            case = ET.SubElement(suite, "testcase", classname=name, name=kind)
            counts["tests"] += 1
            failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
            if failed:
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=f"{kind} checks failed").text = "\n".join(
                    failed
                )
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", f"{total_s:.3f}")
    ET.indent(suite)
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
    )


@dataclass(frozen=True)
class Change:
    """One thing that got worse from a run to the next, for one image: its level (`probe` ""),
    a probe's status or transport (`metric` ""), or one metric of a probe. `text` is the line
    `imagekit report RUN RUN2` prints."""

    image: str
    text: str
    probe: str = ""
    metric: str = ""

    @property
    def about(self) -> str:
        """The line without the image's name (where the image is said already)."""
        return self.text.removeprefix(self.image).removeprefix(":").strip()


def _metric_changes(
    name: str, probe: str, b: ProbeResult, a: ProbeResult, threshold: float
) -> list[Change]:
    found = []
    for metric in sorted(set(b.metrics) & set(a.metrics)):
        x, y = b.metrics[metric], a.metrics[metric]
        if x == 0:
            continue
        change = (y - x) / abs(x)
        worse = -change if metric.endswith(HIGHER_IS_BETTER) else change
        if worse > threshold:
            text = f"{name} {probe}: {metric} {x:g} -> {y:g} ({change:+.0%}, worse)"
            found.append(Change(name, text, probe, metric))
    return found


def regressions(old: Records, new: Records, threshold: float = 0.2) -> list[Change]:
    """What got worse from `old` to `new`: a lower level reached, probes that passed and now
    do not, and metrics that moved the wrong way by more than `threshold` (a fraction)."""
    found = []
    before_all, after_all = _verified(old), _verified(new)
    for name in sorted(set(before_all) & set(after_all)):
        was, now = before_all[name], after_all[name]
        if rank(now.level) < rank(was.level):
            found.append(
                Change(name, f"{name}: verified to level {was.level}, now only {now.level}")
            )
        before = {r.probe: r for r in was.probes}
        after = {r.probe: r for r in now.probes}
        for probe in sorted(set(before) & set(after)):
            b, a = before[probe], after[probe]
            if b.status is Status.PASS and a.status is not Status.PASS:
                text = f"{name} {probe}: passed, now {a.status} ({a.reason})"
                found.append(Change(name, text, probe))
            was_net, now_net = b.facts.get("transport"), a.facts.get("transport")
            if was_net and now_net and was_net != now_net:
                text = f"{name} {probe}: transport was {was_net}, now {now_net}"
                found.append(Change(name, text, probe))
            found += _metric_changes(name, probe, b, a, threshold)
    return found


def changes(old: Records, new: Records, threshold: float = 0.2) -> list[str]:
    """The lines of `regressions(old, new, threshold)`, as `imagekit report RUN RUN2` prints
    them."""
    return [change.text for change in regressions(old, new, threshold)]


def comparison(
    runs: tuple[str, str], old: Records, new: Records, threshold: float
) -> tuple[list[str], str]:
    """`imagekit report RUN RUN2`: each change for the worse from the first run to the
    second, and the line counting them."""
    found = changes(old, new, threshold)
    return found, f"{len(found)} changes for the worse from {runs[0]} to {runs[1]}"
