"""The slim compiler check says what it found, and says so when it could not look
(imagekit/adapters/structure.py): a failed look is never reported as missing headers."""

from __future__ import annotations

from dataclasses import dataclass

from imagekit.adapters.structure import _slim_compiler_check
from imagekit.kernel.labels import ImageLabels

COMPILE = ImageLabels(torch="2.13.0", torch_compile=True)


@dataclass
class Ran:
    rc: int
    stdout: str = ""
    stderr: str = ""


class Root:
    """A testinfra host stand-in: `command -v g++` finds g++, the header look answers `look`."""

    def __init__(self, look: Ran) -> None:
        self.look = look

    def run(self, command: str) -> Ran:
        if command.startswith("command -v "):
            return Ran(0 if command.endswith("g++") else 1)
        return self.look


def test_headers_present_pass() -> None:
    check = _slim_compiler_check(COMPILE, Root(Ran(0, "True True\n")))
    assert check.ok and check.detail == "g++, Python.h, torch headers"


def test_a_missing_header_is_named() -> None:
    check = _slim_compiler_check(COMPILE, Root(Ran(0, "False True\n")))
    assert not check.ok and check.detail == "missing ['Python.h']"


def test_a_look_that_failed_says_why_instead_of_missing() -> None:
    look = Ran(137, "", "Traceback ...\nMemoryError\n")
    check = _slim_compiler_check(COMPILE, Root(look))
    assert not check.ok
    assert check.detail == "could not look (exit 137): MemoryError"
