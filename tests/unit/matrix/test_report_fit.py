"""`imagekit report` on any terminal and on any run folder: the table fits, or becomes one
block per image; a build run shows its builds, not an empty header."""

from __future__ import annotations

from imagekit.kernel.records import BuildRecord, ImageRecord
from imagekit.kernel.text import fitted
from imagekit.verify.summary import run_summary
from tests.fakes import passing, verify_record

HEADER = ["image", "level", "status"]
ROWS = [["pytorch_2.13.0-cpu-py3.11-slim", "cpu (static ok, cpu ok, gpu n/a)", "pass"]]


def test_a_table_that_fits_is_a_table() -> None:
    text = fitted(HEADER, ROWS, width=200)
    assert text.splitlines()[0].split() == HEADER


def test_a_table_wider_than_the_terminal_becomes_one_block_per_image() -> None:
    text = fitted(HEADER, ROWS, width=60)
    assert text.splitlines() == [
        "pytorch_2.13.0-cpu-py3.11-slim",
        "  level   cpu (static ok, cpu ok, gpu n/a)",
        "  status  pass",
    ]
    assert max(len(line) for line in text.splitlines()) <= 60


def test_a_build_run_shows_its_builds() -> None:
    built = BuildRecord(
        name="2.13.0-cpu-py3.11-slim", reference="r", flavour="slim", status="built",
        message="", duration_s=113, size_bytes=1_390_000_000, layer_count=3,
    )  # fmt: skip
    text = run_summary({"2.13.0-cpu-py3.11-slim": ImageRecord(build=built)}, width=80)
    assert "2.13.0-cpu-py3.11-slim  built   1.39 GB" in text


def test_a_verify_run_shows_its_verdicts_fitted() -> None:
    record = ImageRecord(verify=verify_record(passing("env"), passing("autograd")))
    narrow = run_summary({"slim": record}, width=40)
    assert narrow.splitlines()[0] == "slim" and "  status" in narrow
