"""The run page in a real browser, without Docker: the site made from real records of the CPU
demo (tests/data/site-results) and a later verify run derived from them, in which matmul got
slower, opened in headless Chromium (tests/integration/browser.py).

tests/integration/test_report_site.py runs the same checks on the site of the session's own
verify run. `make test` installs Chromium (`make browser`) and sets IMAGEKIT_REQUIRE_BROWSER:
there a missing browser fails; elsewhere (`make unit`) it skips.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from imagekit.adapters.results import RunFolder
from imagekit.adapters.site import write_site
from imagekit.kernel.records import ImageRecord, VerifyRecord
from tests.integration.browser import check_the_run_page, chromium_page

DATA = Path(__file__).resolve().parents[2] / "data" / "site-results"
ARTIFACTS = Path(__file__).resolve().parents[3] / "results" / "test-artifacts"
VERIFY_RUN = "20261202T194342Z-1e59d22c"
LATER_RUN = "20261203T000000Z-5a1e0001"


def expected_states(results: Path) -> dict[str, dict[str, str]]:
    """{image: {probe: state}} of each image's newest verify record, read from the JSON
    itself (not through the site's model); a probe another image ran is "not run" here."""
    newest: dict[str, dict] = {}
    for path in sorted(results.glob("*/images/*.json")):
        record = json.loads(path.read_text())
        if "verify" in record:
            newest[path.stem] = record["verify"]
    probes = {p["probe"] for v in newest.values() for p in v["probes"]}
    return {
        image: {
            p: next((r["status"] for r in v["probes"] if r["probe"] == p), "not run")
            for p in probes
        }
        for image, v in newest.items()
    }


def need_chromium() -> None:
    if shutil.which("chromium") is None:
        if os.environ.get("IMAGEKIT_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed; run `make browser` (make test does)")
        pytest.skip("chromium is not installed (`make browser`; make test requires it)")


def test_the_run_page_of_real_records_in_a_real_browser(tmp_path: Path) -> None:
    need_chromium()
    results = tmp_path / "results"
    shutil.copytree(DATA, results)
    # A later verify run of the full image, matmul 1.5 times slower: a regression to highlight.
    raw = json.loads((results / VERIFY_RUN / "images" / "2.13.0-cpu-py3.11-full.json").read_text())
    for probe in raw["verify"]["probes"]:
        if probe["probe"] == "matmul":
            probe["metrics"] = {k: v * 1.5 for k, v in probe["metrics"].items()}
    later = RunFolder.create(results, LATER_RUN)
    later.update_image(
        "2.13.0-cpu-py3.11-full", ImageRecord(verify=VerifyRecord.model_validate(raw["verify"]))
    )
    index = write_site(results, tmp_path / "site")
    with chromium_page(tmp_path / "profile") as page:
        check_the_run_page(page, index, expected_states(results), ARTIFACTS / "run-page-sample")
        page.open(index.as_uri())
        page.wait_for("document.readyState === 'complete' && !!document.querySelector('#grid')")
        said = page.evaluate("document.getElementById('regressions').innerText")
        assert "What got worse" in said and "matmul_warm_median_ms" in said
        assert page.evaluate("document.querySelectorAll('svg.chart.regressed').length") == 1
