"""Reports of verify results (pure): the Markdown summary, JUnit XML, and run-to-run changes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from imagekit.probes import LEVELS

KEY_METRICS = (
    "matmul_warm_median_ms",
    "gemm_bf16_tflops",
    "gemm_tf32_tflops",
    "allreduce_busbw_gbps",
)
# Metrics where a larger number is better; for the rest (times), smaller is better.
HIGHER_IS_BETTER = ("_tflops", "_gbps")


def _probe_cell(result: dict[str, Any]) -> str:
    marks = {"pass": "pass", "fail": "FAIL", "error": "ERROR", "timeout": "TIMEOUT", "skip": "skip"}
    return str(marks.get(result["status"], result["status"]))


# "none" below every rung, then the rungs in their order.
RANKS = {name: rank for rank, name in enumerate(("none", *LEVELS))}
RUNG_MARKS = {"pass": "ok", "fail": "FAIL", "not run": "-", "n/a": "n/a"}


def level_text(verify: dict[str, Any]) -> str:
    """ "cpu (static ok, cpu ok, gpu -)": the rung reached and the state of each rung."""
    level = str(verify.get("level", "-"))
    rungs = verify.get("levels") or {}
    if not rungs:
        return level
    marks = ", ".join(
        f"{name} {RUNG_MARKS.get(rungs[name], rungs[name])}" for name in RANKS if name in rungs
    )
    return f"{level} ({marks})"


def _inspection(verify: dict[str, Any]) -> list[dict[str, Any]]:
    """The host-side checks of a record: structure, and labels against the data."""
    return [*verify.get("structure", []), *verify.get("labels_agree", [])]


def summary_rows(records: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per verified image, one column per probe."""
    probes: list[str] = []
    for record in records.values():
        for result in record.get("verify", {}).get("probes", []):
            if result["probe"] not in probes:
                probes.append(result["probe"])
    header = ["image", "level", "status", *probes, "inspection", "matmul warm ms"]
    rows = []
    for name in sorted(records):
        verify = records[name].get("verify")
        if not verify:
            continue
        by_probe = {r["probe"]: r for r in verify.get("probes", [])}
        structure = _inspection(verify)
        failed = [c for c in structure if not c["ok"]]
        metric = next(
            (
                r["metrics"].get("matmul_warm_median_ms")
                for r in verify.get("probes", [])
                if r["metrics"].get("matmul_warm_median_ms") is not None
            ),
            None,
        )
        rows.append(
            [
                name,
                level_text(verify),
                verify.get("status", "-"),
                *(_probe_cell(by_probe[p]) if p in by_probe else "-" for p in probes),
                ("ok" if not failed else f"{len(failed)} FAILED") if structure else "-",
                f"{metric:.1f}" if metric is not None else "-",
            ]
        )
    return header, rows


def markdown(records: dict[str, dict[str, Any]], run_id: str) -> str:
    """summary.md: a table people read, then the reasons of everything that did not pass."""
    header, rows = summary_rows(records)
    lines = [f"## imagekit verify, run {run_id}", ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    problems = []
    for name in sorted(records):
        verify = records[name].get("verify") or {}
        for result in verify.get("probes", []):
            if result["status"] in ("fail", "error", "timeout"):
                failed = [c for c in result.get("checks", []) if not c["ok"]]
                detail = "; ".join(f"{c['name']}: {c['detail']}" for c in failed)
                problems.append(
                    f"- **{name}** `{result['probe']}` {result['status']}: "
                    f"{result.get('reason', '')}{' (' + detail + ')' if detail else ''}"
                )
        for check in verify.get("structure", []):
            if not check["ok"]:
                problems.append(f"- **{name}** structure: {check['name']}: {check['detail']}")
        for check in verify.get("labels_agree", []):
            if not check["ok"]:
                problems.append(f"- **{name}** labels: {check['name']}: {check['detail']}")
    if problems:
        lines += ["", "### Problems", "", *problems]
    return "\n".join(lines) + "\n"


def junit(records: dict[str, dict[str, Any]], run_id: str) -> str:
    """junit.xml: one testcase per image x probe, plus one per image for the structure checks
    and one for the label checks."""
    suite = ET.Element("testsuite", name=f"imagekit verify {run_id}")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    total_s = 0.0
    for name in sorted(records):
        verify = records[name].get("verify") or {}
        for result in verify.get("probes", []):
            case = ET.SubElement(
                suite,
                "testcase",
                classname=name,
                name=result["probe"],
                time=f"{result.get('duration_s', 0.0):.3f}",
            )
            total_s += float(result.get("duration_s", 0.0))
            counts["tests"] += 1
            status = result["status"]
            if status == "fail":
                counts["failures"] += 1
                failed = [f"{c['name']}: {c['detail']}" for c in result["checks"] if not c["ok"]]
                ET.SubElement(case, "failure", message=result.get("reason", "")).text = "\n".join(
                    failed
                )
            elif status in ("error", "timeout"):
                counts["errors"] += 1
                ET.SubElement(case, "error", message=f"{status}: {result.get('reason', '')}")
            elif status == "skip":
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=result.get("reason", ""))
        for kind in ("structure", "labels_agree"):
            checks = verify.get(kind)
            if not checks:
                continue
            case = ET.SubElement(suite, "testcase", classname=name, name=kind)
            counts["tests"] += 1
            failed = [f"{c['name']}: {c['detail']}" for c in checks if not c["ok"]]
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


def changes(
    old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], threshold: float = 0.2
) -> list[str]:
    """What got worse from `old` to `new`: a lower level reached, probes that passed and now
    do not, and metrics that moved the wrong way by more than `threshold` (a fraction)."""
    found = []
    for name in sorted(set(old) & set(new)):
        old_verify, new_verify = old[name].get("verify") or {}, new[name].get("verify") or {}
        was, now = old_verify.get("level", "none"), new_verify.get("level", "none")
        if RANKS.get(now, 0) < RANKS.get(was, 0):
            found.append(f"{name}: verified to level {was}, now only {now}")
        before = {r["probe"]: r for r in old_verify.get("probes", [])}
        after = {r["probe"]: r for r in new_verify.get("probes", [])}
        for probe in sorted(set(before) & set(after)):
            b, a = before[probe], after[probe]
            if b["status"] == "pass" and a["status"] != "pass":
                found.append(f"{name} {probe}: passed, now {a['status']} ({a.get('reason', '')})")
            for metric in sorted(set(b.get("metrics", {})) & set(a.get("metrics", {}))):
                x, y = float(b["metrics"][metric]), float(a["metrics"][metric])
                if x == 0:
                    continue
                change = (y - x) / abs(x)
                worse = -change if metric.endswith(HIGHER_IS_BETTER) else change
                if worse > threshold:
                    found.append(f"{name} {probe}: {metric} {x:g} -> {y:g} ({change:+.0%}, worse)")
    return found
