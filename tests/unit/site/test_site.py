"""The run page's data (`imagekit report --html`), from real records: the CPU demo's build,
verify and publish runs of one test session (tests/data/site-results/README.md), and runs
derived from them through the record types where a case needs one the session did not make.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path

import pytest

from imagekit.adapters.results import read_runs
from imagekit.adapters.site import write_site
from imagekit.kernel.records import ImageRecord, Status, VerifyRecord
from imagekit.site.grid import CellState
from imagekit.site.history import (
    BUILD_TIME,
    IMPORT_TORCH,
    MATMUL_WARM,
    PENDING_FIXES,
    sparkline,
)
from imagekit.site.html import render_site
from imagekit.site.page import ImagePage, RunRecords, site_model
from imagekit.verify.agreement import glibc_floor_met
from tests.fakes import audit_record

DATA = Path(__file__).resolve().parents[2] / "data" / "site-results"
VERIFY_RUN = "20261202T194342Z-1e59d22c"
FULL, SLIM = "2.13.0-cpu-py3.11-full", "2.13.0-cpu-py3.11-slim"


def real_runs() -> list[RunRecords]:
    return read_runs(DATA)


def verify_record(name: str) -> VerifyRecord:
    raw = json.loads((DATA / VERIFY_RUN / "images" / f"{name}.json").read_text())
    return VerifyRecord.model_validate(raw["verify"])


def later_verify(name: str, run_id: str, matmul_factor: float, **metrics: float) -> RunRecords:
    """A verify run after the real one: its record with the matmul probe's figures scaled by
    `matmul_factor` and `metrics` replacing the compile probe's, validated as verify writes."""
    raw = json.loads((DATA / VERIFY_RUN / "images" / f"{name}.json").read_text())["verify"]
    for probe in raw["probes"]:
        if probe["probe"] == "matmul":
            probe["metrics"] = {k: v * matmul_factor for k, v in probe["metrics"].items()}
        if probe["probe"] == "compile" and metrics:
            probe["metrics"] = metrics
    record = ImageRecord(verify=VerifyRecord.model_validate(raw))
    return RunRecords(run_id, "verify", "ci", {name: record})


def test_every_image_of_the_run_has_a_row_and_a_page() -> None:
    site = site_model(real_runs())
    assert [p.name for p in site.pages] == [FULL, SLIM]
    assert {p.href for p in site.pages} == {f"image/{FULL}.html", f"image/{SLIM}.html"}
    assert [(p.flavour, p.platform, p.cell) for p in site.pages] == [
        ("full", "linux/amd64", "2.13.0-cpu-py3.11"),
        ("slim", "linux/amd64", "2.13.0-cpu-py3.11"),
    ]


def test_every_probe_cell_says_what_the_record_says() -> None:
    site = site_model(real_runs())
    probes = [c.name for c in site.columns if c.kind == "probe"]
    assert probes == [r.probe for r in verify_record(FULL).probes]
    for page in site.pages:
        record = verify_record(page.name)
        cells = {c.column.name: c for c in page.cells}
        for probe in probes:
            result = record.result(probe)
            want = CellState(result.status.value) if result else CellState.NOT_RUN
            assert cells[probe].state is want, (page.name, probe)
        assert cells["verdict"].state is CellState.PASS
        assert (cells["static"].state, cells["cpu"].state, cells["gpu"].state) == (
            CellState.PASS,
            CellState.PASS,
            CellState.NOT_APPLICABLE,
        )
    # The slim image runs no cuda_extension probe at all: not run, not a skip.
    slim = {c.column.name: c for c in site.pages[1].cells}
    assert slim["cuda_extension"].state is CellState.NOT_RUN
    assert slim["cudnn"].state is CellState.SKIP and "needs a GPU" in slim["cudnn"].detail


def test_the_page_holds_versions_size_layers_and_the_signed_publication() -> None:
    slim = site_model(real_runs()).pages[1]
    assert ("torch", "2.13.0+cpu", "2.13.0") in slim.versions
    assert slim.size.text == "1.48 GB of 1.60 GB (93%)" and not slim.size.over
    assert slim.build is not None and slim.build.image_id == slim.verify.image_id  # type: ignore[union-attr]
    assert slim.layers and all(layer.size_bytes > 0 for layer in slim.layers)
    signed = slim.signed
    assert signed is not None and signed.run_id == "20261202T194539Z-3a9e3320"
    assert "https://imagekit.dev/attestations/verify/v1" in signed.record.attestations
    # The newest publication failed: the grid says so, and the page says why.
    publish = {c.column.name: c for c in slim.cells}["publish"]
    assert publish.state is CellState.FAIL and "cannot reach the registry" in publish.detail
    assert slim.seal == ""


def _page_with_glibc(glibc: str) -> ImagePage:
    """The slim image's page from its real verify record, with the env probe's glibc set."""
    raw = json.loads((DATA / VERIFY_RUN / "images" / f"{SLIM}.json").read_text())["verify"]
    [env] = [probe for probe in raw["probes"] if probe["probe"] == "env"]
    env["facts"]["glibc"] = glibc
    record = ImageRecord(verify=VerifyRecord.model_validate(raw))
    [page] = site_model([RunRecords(VERIFY_RUN, "verify", "ci", {SLIM: record})]).pages
    return page


def test_the_glibc_label_is_shown_as_the_floor_it_is() -> None:
    # The label is the oldest glibc the wheels need: an image with a newer one agrees with it.
    slim = site_model(real_runs()).pages[1]
    assert ("glibc", "glibc 2.36", ">= 2.28, met") in slim.versions
    assert ("glibc", "glibc 2.28", ">= 2.28, met") in _page_with_glibc("glibc 2.28").versions
    # Compared as versions, not as text: 2.9 is older than 2.28.
    assert ("glibc", "glibc 2.9", ">= 2.28, not met") in _page_with_glibc("glibc 2.9").versions
    assert ("glibc", "musl", ">= 2.28") in _page_with_glibc("musl").versions


@pytest.mark.parametrize(
    ("seen", "floor", "met"),
    [("glibc 2.36", "2.28", True), ("glibc 2.17", "2.28", False), (None, "2.28", None),
     ("glibc 2.39", "", None)],
)  # fmt: skip
def test_glibc_floor_met(seen: str | None, floor: str, met: bool | None) -> None:
    assert glibc_floor_met(seen, floor) is met


def test_a_refused_publication_shows_its_reason() -> None:
    slim = site_model(real_runs()).pages[1]
    refused = [p for p in slim.publications if p.record.status == "refused"]
    assert refused and "not sealed with a key" in refused[0].record.reasons[0]


def test_a_size_over_budget_fails_its_cell() -> None:
    runs = real_runs()
    build_run = next(r for r in runs if r.run_id == "20261202T193904Z-95d5ff56")
    record = build_run.images[FULL]
    assert record.build is not None
    raw = record.to_json()
    # What build records when the image is over its budget.
    raw["build"] |= {"size_budget_bytes": 1_000_000_000, "status": "failed", "message": "over"}
    over = RunRecords(
        "20261203T000000Z-00000003", "build", "ci", {FULL: ImageRecord.model_validate(raw)}
    )
    page = site_model([*runs, over]).pages[0]
    # The newest build of the verified image id is the one over budget.
    assert page.size.over
    assert {c.column.name: c for c in page.cells}["size"].state is CellState.FAIL
    assert page.problems == ("build failed: over",)


def test_a_regression_is_highlighted_on_its_series_and_listed() -> None:
    runs = [*real_runs(), later_verify(FULL, "20261203T000000Z-00000001", 1.5)]
    site = site_model(runs, threshold=0.2)
    full = site.pages[0]
    assert [c.metric for c in full.regressions] == ["matmul_cold_ms", "matmul_warm_median_ms"]
    assert site.regressions == full.regressions and site.compared == 1
    warm = next(s for s in full.history if s.figure == MATMUL_WARM)
    assert [p.run_id for p in warm.points] == [VERIFY_RUN, "20261203T000000Z-00000001"]
    assert warm.change is not None and "worse" in warm.change.text
    # The other figures did not move: nothing marked.
    assert all(s.change is None for s in full.history if s.figure != MATMUL_WARM)
    html = render_site(site)
    assert 'class="chart regressed"' in html[full.href] and "What got worse" in html["index.html"]


def test_a_faster_run_is_no_regression() -> None:
    site = site_model([*real_runs(), later_verify(FULL, "20261203T000000Z-00000001", 0.5)])
    assert site.regressions == ()


def test_a_missing_figure_is_absent_not_zero() -> None:
    # The second run's compile probe recorded no first_compile_s: that series keeps one point.
    later = later_verify(FULL, "20261203T000000Z-00000001", 1.0, eager_warm_median_ms=1.0)
    full = site_model([*real_runs(), later]).pages[0]
    by_label = {s.figure.label: s for s in full.history}
    assert [p.value for p in by_label["first compile"].points] == [pytest.approx(21.340226)]
    # No probe records `import torch` seconds, and a CPU matmul no TFLOP/s: no points at all.
    assert by_label[IMPORT_TORCH.label].points == () and by_label[IMPORT_TORCH.label].chart is None
    assert by_label["matmul"].points == ()
    # An up-to-date image's "build" was no build: only the real build is a point.
    build = next(s for s in full.history if s.figure == BUILD_TIME)
    assert [p.run_id for p in build.points] == ["20261202T193904Z-95d5ff56"]
    html = render_site(site_model([*real_runs(), later]))[full.href]
    assert "not recorded in any run" in html


def test_an_image_only_built_is_listed_as_not_verified() -> None:
    build_only = [r for r in real_runs() if r.command == "build"]
    page = site_model(build_only).pages[0]
    assert page.verify is None and page.verdict.state is CellState.NOT_RUN
    assert "not verified" in render_site(site_model(build_only))["index.html"]


def test_a_record_edited_by_hand_is_shown_as_unsealed(tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(DATA, results)
    path = results / VERIFY_RUN / "images" / f"{FULL}.json"
    raw = json.loads(path.read_text())
    raw["verify"]["level"] = "gpu"
    path.write_text(json.dumps(raw))
    full = site_model(read_runs(results)).pages[0]
    assert full.seal and any(p.startswith("seal:") for p in full.problems)


def test_a_failed_probe_is_a_problem_with_its_failed_checks() -> None:
    raw = json.loads((DATA / VERIFY_RUN / "images" / f"{SLIM}.json").read_text())["verify"]
    matmul = next(p for p in raw["probes"] if p["probe"] == "matmul")
    matmul |= {"status": "fail", "reason": "wrong numbers"}
    matmul["checks"][0] |= {"ok": False, "detail": "max relative error 0.5"}
    raw["status"] = "fail"
    broken = ImageRecord(verify=VerifyRecord.model_validate(raw))
    page = site_model(
        [RunRecords("20261203T000000Z-00000002", "verify", "ci", {SLIM: broken})]
    ).pages[0]
    assert page.verdict.state is CellState.FAIL
    assert {c.column.name: c for c in page.cells}["matmul"].state is CellState.FAIL
    assert page.problems[:2] == (
        "probe matmul fail: wrong numbers",
        "probe matmul: A @ B matches float64: max relative error 0.5",
    )
    assert Status.FAIL.bad


def test_the_filters_offer_every_cell_flavour_platform_and_state() -> None:
    site = site_model(real_runs())
    assert site.choices("flavour") == ("full", "slim")
    assert site.choices("platform") == ("linux/amd64",)
    assert site.choices("cell") == ("2.13.0-cpu-py3.11",)
    assert set(site.choices("states")) == {"pass", "fail", "skip", "not-run", "na"}


@pytest.mark.parametrize(
    "values,points,dots",
    [
        ([5.0], "", ((90.0, 20.0),)),
        ([1.0, 1.0], "5,20 175,20", ((5.0, 20.0), (175.0, 20.0))),
        ([1.0, 3.0, 2.0], "5,35 90,5 175,20", ((5.0, 35.0), (90.0, 5.0), (175.0, 20.0))),
    ],
    ids=["one value is a dot", "equal values lie on the middle", "larger is higher"],
)
def test_sparkline_geometry(values: list[float], points: str, dots: tuple) -> None:
    line = sparkline(values)
    assert (line.width, line.height, line.points, line.dots) == (180, 40, points, dots)


def test_a_sparkline_of_nothing_is_refused() -> None:
    with pytest.raises(ValueError):
        sparkline([])


def test_every_value_is_escaped(tmp_path: Path) -> None:
    later = later_verify(FULL, "20261203T000000Z-00000001", 1.0)
    verify = later.images[FULL].verify
    assert verify is not None
    raw = verify.to_json()
    raw["probes"][1]["reason"] = "<script>alert(1)</script>"
    evil = RunRecords(
        later.run_id,
        "verify",
        "<b>host</b>",
        {FULL: ImageRecord(verify=VerifyRecord.model_validate(raw))},
    )
    pages = render_site(site_model([*real_runs(), evil]))
    assert "<script>alert(1)" not in pages[f"image/{FULL}.html"]
    assert "&lt;script&gt;alert(1)" in pages[f"image/{FULL}.html"]
    assert "<b>host</b>" not in pages["index.html"]


def test_the_site_is_written_self_contained_and_small(tmp_path: Path) -> None:
    index = write_site(DATA, tmp_path / "site")
    files = [p for p in (tmp_path / "site").rglob("*") if p.is_file()]
    assert index == tmp_path / "site" / "index.html"
    assert {f"image/{FULL}.html", f"image/{SLIM}.html"} <= {
        str(p.relative_to(tmp_path / "site")) for p in files
    }
    assert sum(p.stat().st_size for p in files) < 1_000_000
    for page in (p for p in files if p.suffix == ".html"):
        text = page.read_text()
        # Nothing is fetched: no remote script, style, font or image.
        assert not re.search(r'(src|href)="(https?:)?//', text), page
        assert "<link " not in text and "<script src" not in text and "@import" not in text
    # Every raw file a page links to was copied.
    for page in (p for p in files if p.suffix == ".html"):
        for href in re.findall(r'href="([^"#]+)"', page.read_text()):
            assert (page.parent / href).resolve().is_file(), (page, href)


def test_the_same_records_make_the_same_pages() -> None:
    assert render_site(site_model(real_runs())) == render_site(site_model(real_runs()[::-1]))


def test_report_html_writes_the_site_and_prints_its_page(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from imagekit.cli import app

    out = tmp_path / "site"
    done = CliRunner().invoke(app, ["report", "--results", str(DATA), "--html", str(out)])
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == str((out / "index.html").resolve())
    assert (out / "image" / f"{FULL}.html").is_file()
    named = CliRunner().invoke(app, ["report", str(DATA / VERIFY_RUN), "--html", str(out)])
    assert named.exit_code == 2 and "name no run" in named.output


def test_the_security_column_shows_the_newest_audit_its_age_and_the_fixes_over_time() -> None:
    image = verify_record(SLIM).image_id
    lacking = ("libssl3", "3.0.20-1~deb12u2", "3.0.22-1~deb12u2")
    first = audit_record(lacking, ("zlib1g", "1:1.2.13", "1:1.2.13+deb12u1"), image=image,
                         at="2026-12-03T08:00:00+00:00")  # fmt: skip
    clean = audit_record(image=image, at="2026-12-05T08:00:00+00:00")
    audits = [
        RunRecords("20261203T080000Z-0000000a", "audit", "ci", {SLIM: ImageRecord(audit=first)}),
        RunRecords("20261205T080000Z-0000000b", "audit", "ci", {SLIM: ImageRecord(audit=clean)}),
    ]
    site = site_model([*real_runs(), *audits], today=dt.date(2026, 12, 7))
    full, slim = site.pages
    [cell] = [c for c in slim.cells if c.column.name == "security"]
    assert (cell.state, cell.text) == (CellState.PASS, "0 pending")
    assert "audited 2 days ago, built 5 days ago" in cell.detail
    assert next(c for c in full.cells if c.column.name == "security").text == "not audited"
    [series] = [s for s in slim.history if s.figure is PENDING_FIXES]
    assert [p.value for p in series.points] == [2.0, 0.0]
    # The older audit alone: the image fails it, and its page lists each fix it lacks.
    site = site_model([*real_runs(), audits[0]], today=dt.date(2026, 12, 7))
    slim = site.pages[1]
    [cell] = [c for c in slim.cells if c.column.name == "security"]
    assert (cell.state, cell.text) == (CellState.FAIL, "2 pending")
    assert "libssl3 3.0.20-1~deb12u2 -> 3.0.22-1~deb12u2" in cell.detail
    html = render_site(site)
    assert "<h2>Security fixes</h2>" in html[slim.href] and "3.0.22-1~deb12u2" in html[slim.href]
    assert 'data-column="security" data-state="fail"' in html["index.html"]
    # An audit of an image built before this one says nothing of it.
    older = audit_record(lacking, image="sha256:" + "9" * 64, at="2026-12-06T08:00:00+00:00")
    later = RunRecords("20261206T080000Z-0000000c", "audit", "ci", {SLIM: ImageRecord(audit=older)})
    slim = site_model([*real_runs(), later], today=dt.date(2026, 12, 7)).pages[1]
    [cell] = [c for c in slim.cells if c.column.name == "security"]
    assert (cell.state, cell.text) == (CellState.NOT_RUN, "not audited")


def test_a_patched_image_says_what_it_replaced_and_an_ended_release_is_unsupported() -> None:
    image = verify_record(SLIM).image_id
    lacking = ("libssl3", "3.0.20-1~deb12u2", "3.0.22-1~deb12u2")
    published = audit_record(lacking, image="sha256:" + "9" * 64, at="2026-12-06T08:00:00+00:00")
    rebuilt = audit_record(image=image, at="2026-12-07T08:00:00+00:00")
    runs = [
        RunRecords(
            "20261206T080000Z-0000000c", "audit", "ci", {SLIM: ImageRecord(audit=published)}
        ),
        RunRecords("20261207T080000Z-0000000d", "audit", "ci", {SLIM: ImageRecord(audit=rebuilt)}),
    ]
    site = site_model([*real_runs(), *runs], today=dt.date(2026, 12, 7))
    slim = site.pages[1]
    html = render_site(site)[slim.href]
    assert "<b>Replaces</b> <code>r</code>" in html
    assert "<code>libssl3</code> 3.0.20-1~deb12u2 &rarr; 3.0.22-1~deb12u2" in html
    # Past its release's end of patch: the cell says so beside what it lacks.
    ended = audit_record(lacking, image=image, end_of_patch="2026-06-30")
    run = RunRecords("20261207T090000Z-0000000e", "audit", "ci", {SLIM: ImageRecord(audit=ended)})
    slim = site_model([*real_runs(), run], today=dt.date(2026, 12, 7)).pages[1]
    [cell] = [c for c in slim.cells if c.column.name == "security"]
    assert cell.text == "1 pending, unsupported since 2026-06-30"
