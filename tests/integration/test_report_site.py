"""The run page of the session's own verify run of the demo images, in headless Chromium: every
image and probe state found, the charts drawn, an image's page and back, no console error. The
screenshots are kept under results/test-artifacts/run-page/ (ci.yml uploads that folder).

tests/unit/site/test_report_site_browser.py runs the same checks without Docker, on recorded runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.adapters.site import write_site
from tests.integration.browser import check_the_run_page, chromium_page
from tests.integration.test_workstation import ARTIFACTS
from tests.unit.site.test_report_site_browser import expected_states

pytestmark = pytest.mark.integration


def test_the_run_page_of_a_real_verify_run_in_a_real_browser(
    demo_verify: dict, tmp_path: Path
) -> None:
    results = Path(demo_verify["run"]).parent
    index = write_site(results, tmp_path / "site")
    expected = expected_states(results)
    verified = set(demo_verify["data"]["images"])
    assert verified <= set(expected), f"{sorted(verified)} not all in {sorted(expected)}"
    with chromium_page(tmp_path / "profile") as page:
        check_the_run_page(page, index, expected, ARTIFACTS / "run-page")
    size = sum(p.stat().st_size for p in (tmp_path / "site").rglob("*") if p.is_file())
    assert size < 3_000_000, f"the site is {size} bytes"
