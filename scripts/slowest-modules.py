"""The test modules that cost a run of the suite the most time, from its JUnit files:

    python scripts/slowest-modules.py results/test-artifacts/*.xml

Each module's tests are summed (pytest's JUnit time is setup + call + teardown, so a module's
fixtures count where they run), per session file, slowest first. `make test` prints this at its
end: the suite's budget is spent module by module, and a module that grows shows up here.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

TOP = 12


def module_of(classname: str) -> str:
    """`tests.integration.test_act.TestX` -> `tests/integration/test_act.py`."""
    parts = classname.split(".")
    last = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
    return "/".join(parts[: last + 1]) + ".py"


def module_times(junit: Path) -> Counter[str]:
    """Seconds per test module in one JUnit file."""
    times: Counter[str] = Counter()
    for case in ET.parse(junit).getroot().iter("testcase"):
        times[module_of(case.get("classname", "?"))] += float(case.get("time") or 0)
    return times


def report(files: list[Path], top: int = TOP) -> str:
    """The slowest modules of each file, as lines for people."""
    lines = []
    for junit in files:
        times = module_times(junit)
        lines.append(
            f"---- slowest modules of {junit.name} ({sum(times.values()) / 60:.1f} min) ----"
        )
        lines += [f"{s / 60:6.1f} min  {m}" for m, s in times.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    files = [Path(a) for a in argv if Path(a).is_file()]
    if files:
        print(report(files))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
