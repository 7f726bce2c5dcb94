"""scripts/slowest-modules.py: what `make test` prints at its end, from the JUnit files."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("slowest", ROOT / "scripts/slowest-modules.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.integration.test_act" name="test_a" time="400.0" />
<testcase classname="tests.integration.test_act" name="test_b" time="20.0" />
<testcase classname="tests.integration.test_verify.TestStop" name="test_c" time="300.0" />
<testcase classname="tests.unit.build.test_render" name="test_d" time="1.5" />
</testsuite></testsuites>"""


def test_each_module_sums_its_tests_and_the_slowest_comes_first(tmp_path: Path) -> None:
    junit = tmp_path / "integration.xml"
    junit.write_text(JUNIT)
    slowest = _script()

    times = slowest.module_times(junit)
    assert times["tests/integration/test_act.py"] == 420.0
    assert times["tests/integration/test_verify.py"] == 300.0  # a class's tests: its module's
    lines = slowest.report([junit], top=2).splitlines()
    assert lines[0] == "---- slowest modules of integration.xml (12.0 min) ----"
    assert lines[1:] == ["   7.0 min  tests/integration/test_act.py",
                         "   5.0 min  tests/integration/test_verify.py"]  # fmt: skip
