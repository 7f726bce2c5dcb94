"""What `imagekit export` decides before it writes (hpc/export.py, hpc/requests.py): where its
output goes, what it refuses, the mksquashfs command, the lines it prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.errors import ExitCode, InputError
from imagekit.hpc.export import Exported, ExportFormat, default_out, mksquashfs_argv
from imagekit.hpc.requests import ExportCommand

ID = "2901a7722af302654526785ea46b3302a2fa02404b454f0eda401f3442bb7e6d"


@pytest.mark.parametrize(
    ("image", "export_format", "out"),
    [
        ("imagekit-demo/pytorch:2.13.0-cpu-py3.11-slim", ExportFormat.DIR,
         "pytorch-2.13.0-cpu-py3.11-slim"),
        ("imagekit-demo/pytorch:2.13.0-cpu-py3.11-slim", ExportFormat.SQUASHFS,
         "pytorch-2.13.0-cpu-py3.11-slim.sqfs"),
        ("127.0.0.1:5000/team/torch:1", ExportFormat.DIR, "torch-1"),
        ("ubuntu", ExportFormat.DIR, "ubuntu-latest"),
        (f"nvcr.io/nvidia/pytorch@sha256:{ID}", ExportFormat.DIR, f"pytorch-sha256-{ID[:12]}"),
        (f"sha256:{ID}", ExportFormat.SQUASHFS, f"image-{ID[:12]}.sqfs"),
        (ID[:12], ExportFormat.DIR, f"image-{ID[:12]}"),
    ],
)  # fmt: skip
def test_the_default_out_is_the_repository_s_last_part_and_the_tag(
    image: str, export_format: ExportFormat, out: str
) -> None:
    assert default_out(image, export_format) == Path(out)


def test_an_existing_out_is_refused_before_any_engine_call(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    for out in (taken, dangling):
        with pytest.raises(InputError) as refused:
            ExportCommand("r/x:1", out=out)
        assert refused.value.exit_code == ExitCode.BAD_INPUT
        assert "remove it, or pick another --out" in refused.value.hint


def test_the_default_out_is_refused_when_it_exists_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x-1.sqfs").write_text("")
    ExportCommand("r/x:1")  # the folder's name is free
    with pytest.raises(InputError, match=r"x-1\.sqfs exists"):
        ExportCommand("r/x:1", format=ExportFormat.SQUASHFS)


def test_an_out_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a folder"):
        ExportCommand("r/x:1", out=tmp_path / "missing" / "x")


def test_mksquashfs_makes_the_same_bytes_owned_by_root() -> None:
    argv = mksquashfs_argv("/usr/bin/mksquashfs", Path("/w/root"), Path("/w/x.sqfs"), 1234)
    assert argv == [
        "/usr/bin/mksquashfs", "/w/root", "/w/x.sqfs", "-noappend", "-all-root", "-no-xattrs",
        "-mkfs-time", "1234", "-quiet",
    ]  # fmt: skip


def test_the_summary_says_what_was_skipped_only_when_something_was() -> None:
    done = Exported(Path("x"), ExportFormat.DIR, "r/x:1", "sha256:1", 10, 3, 0, 1.25)
    assert done.summary() == "exported r/x:1 to x (dir): 3 entries, 10 bytes, in 1.2 s"
    skipped = Exported(Path("x"), ExportFormat.DIR, "r/x:1", "sha256:1", 10, 3, 2, 1.0)
    assert "; 2 device nodes and FIFOs skipped" in skipped.summary()
    assert skipped.document()["skipped_special_files"] == 2
    assert skipped.document()["format"] == "dir"
