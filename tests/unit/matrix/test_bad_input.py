"""Bad input on the command line is refused up front: exit 2, before any Docker call, with
`file:line:col` (a matrix) or the option's name (an option), a hint, and never a traceback.

Each case goes through the real CLI (`imagekit.cli.app`); the engine's `connect` (and the buildx
probe) are replaced by one that fails the test, so a case that reached Docker could not pass.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from imagekit.adapters import builders, engine
from imagekit.cli import app
from imagekit.matrix.load import MAX_MATRIX_BYTES

ROOT = Path(__file__).resolve().parents[3]
CA_VARS = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
runner = CliRunner()


@pytest.fixture(autouse=True)
def no_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any command that gets as far as the engine fails the test; no CA variable leaks in."""

    def docker(*args: object, **kwargs: object) -> None:
        raise AssertionError("bad input reached Docker")

    monkeypatch.setattr(engine, "connect", docker)
    # The buildx plugin is a local program, asked before the inputs are checked (which builder
    # they are checked for): here it is absent, so none runs.
    monkeypatch.setattr(builders, "buildx_version", lambda: None)
    for name in CA_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    """The CPU example: a valid matrix, so only the input under test is wrong."""
    path = tmp_path / "matrix.yaml"
    shutil.copy(ROOT / "examples" / "cpu.yaml", path)
    return path


def refused(result: Result, *words: str) -> str:
    """The output of a command that must have been refused as bad input, with `words` in it."""
    output = result.output
    assert result.exit_code == 2, output
    assert "Traceback" not in output, output
    # An exit, not an exception the runner caught on its way out.
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "hint: " in output, output
    for word in words:
        assert word in output, output
    return output


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(app, list(args), env=env)


def out_args(command: str, tmp_path: Path) -> list[str]:
    """Where each command writes, kept inside tmp_path."""
    if command == "render":
        return ["--out", str(tmp_path / "out")]
    if command == "bake":
        return ["--out", str(tmp_path / "bake.json"), "--contexts", str(tmp_path / "ctx")]
    return ["--results", str(tmp_path / "results")]


# Matrix files: located at file:line:col ------------------------------------------------------


def test_check_refuses_a_package_that_is_a_pip_option_at_its_line(matrix: Path) -> None:
    text = matrix.read_text(encoding="utf-8")
    text = text.replace(
        "- jupyterlab==4.6.6\n", "- jupyterlab==4.6.6\n      - -i http://evil/simple\n"
    )
    matrix.write_text(text, encoding="utf-8")
    line = text.splitlines().index("      - -i http://evil/simple") + 1
    refused(
        invoke("check", "--matrix", str(matrix)),
        f"{matrix}:{line}:9: package '-i http://evil/simple' is a pip option",
        "--pip-index-url/--extra-index-url",
    )


def test_render_refuses_a_direct_reference_before_writing_anything(
    matrix: Path, tmp_path: Path
) -> None:
    text = matrix.read_text(encoding="utf-8")
    text = text.replace("- tensorboard==2.21.0\n", '- "tb @ https://host/tb.whl"\n')
    matrix.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    refused(
        invoke("render", "--matrix", str(matrix), "--out", str(out), "--no-ca-cert"),
        "is a direct reference (NAME @ URL)",
        "wheels with --wheelhouse",
    )
    assert not out.exists()


def test_build_refuses_a_matrix_file_over_one_mib_at_its_top(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_MATRIX_BYTES + 1))
    refused(
        invoke("build", "--matrix", str(big), "--results", str(tmp_path / "results")),
        f"{big}:1:1: the matrix file is larger than 1 MiB",
        "--matrix",
    )


def test_check_refuses_a_matrix_that_is_not_utf8_at_its_top(tmp_path: Path) -> None:
    utf16 = tmp_path / "matrix.yaml"
    utf16.write_bytes((ROOT / "examples" / "cpu.yaml").read_text().encode("utf-16"))
    refused(
        invoke("check", "--matrix", str(utf16)),
        f"{utf16}:1:1: not UTF-8 text (byte 0, 0xff)",
        "save it as UTF-8",
    )


# --ca-cert and the variables it defaults from: named with the file ---------------------------


@pytest.fixture
def not_pem(tmp_path: Path) -> Path:
    path = tmp_path / "notpem.txt"
    path.write_text("this is not a certificate\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("command", ["render", "build", "bake"])
def test_a_ca_cert_that_is_not_pem_is_refused_naming_the_option(
    command: str, matrix: Path, not_pem: Path, tmp_path: Path
) -> None:
    refused(
        invoke(
            command,
            "--matrix",
            str(matrix),
            "--ca-cert",
            str(not_pem),
            *out_args(command, tmp_path),
        ),
        f"--ca-cert {not_pem} is not a PEM CA bundle (no -----BEGIN CERTIFICATE----- block)",
        "--no-ca-cert",
    )


@pytest.mark.parametrize("name", CA_VARS)
def test_a_ca_variable_naming_a_file_that_is_not_pem_is_refused_naming_it(
    name: str, matrix: Path, not_pem: Path, tmp_path: Path
) -> None:
    refused(
        invoke(
            "render",
            "--matrix",
            str(matrix),
            "--out",
            str(tmp_path / "out"),
            env={name: str(not_pem)},
        ),
        f"${name} names {not_pem}, which is not a PEM CA bundle",
        f"unset {name}",
    )


def test_no_ca_cert_ignores_a_variable_that_is_not_pem(
    matrix: Path, not_pem: Path, tmp_path: Path
) -> None:
    result = invoke(
        "render",
        "--matrix",
        str(matrix),
        "--out",
        str(tmp_path / "out"),
        "--no-ca-cert",
        env={"PIP_CERT": str(not_pem)},
    )
    assert result.exit_code == 0, result.output


# --wheelhouse: a folder with wheels in it ---------------------------------------------------


@pytest.fixture
def empty_wheelhouse(tmp_path: Path) -> Path:
    """What an interrupted `make wheelhouse` leaves: the folder and a stamp, no wheels."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / ".complete").write_text("", encoding="utf-8")
    return folder


@pytest.mark.parametrize("command", ["render", "build", "bake"])
def test_an_empty_wheelhouse_is_refused_up_front_with_how_to_fill_it(
    command: str, matrix: Path, empty_wheelhouse: Path, tmp_path: Path
) -> None:
    refused(
        invoke(
            command,
            "--matrix",
            str(matrix),
            "--wheelhouse",
            str(empty_wheelhouse),
            "--no-ca-cert",
            *out_args(command, tmp_path),
        ),
        f"--wheelhouse {empty_wheelhouse} has no wheels (*.whl)",
        "make wheelhouse",
        "pip download --only-binary=:all: -d",
    )


def test_a_wheelhouse_with_a_wheel_beside_make_s_stamp_renders(
    matrix: Path, empty_wheelhouse: Path, tmp_path: Path
) -> None:
    (empty_wheelhouse / "torch-2.13.0-cp311-none-any.whl").write_bytes(b"wheel")
    out = tmp_path / "out"
    result = invoke(
        "render",
        "--matrix",
        str(matrix),
        "--wheelhouse",
        str(empty_wheelhouse),
        "--no-ca-cert",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert (
        out / "2.13.0-cpu-py3.11-slim" / "wheelhouse" / "torch-2.13.0-cp311-none-any.whl"
    ).is_file()
    assert not (out / "2.13.0-cpu-py3.11-slim" / "wheelhouse" / ".complete").exists()


def test_run_user_that_is_not_user_group_is_one_line_before_any_engine_call() -> None:
    result = runner.invoke(app, ["run", "img:1", "--user", "4321:43:21"])
    assert result.exit_code == 2
    assert "--user '4321:43:21' is not USER[:GROUP]" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "value",
    ["127.0.0.1:5000/cache/pytorch:latest", "reg/cache@sha256:" + "a" * 64, "Bad Name", ""],
)
def test_a_cache_repository_with_a_tag_or_not_a_name_is_refused(matrix: Path, value: str) -> None:
    """Each image's cache is tagged as the image is: the option names a repository only."""
    result = invoke("build", "--matrix", str(matrix), "--builder", "buildx", "--cache-to", value)
    refused(result, f"--cache-to {value!r} is not a repository name")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--cache-from", "127.0.0.1:5000/c"], "--cache-from"),
        (["--cache-to", "127.0.0.1:5000/c"], "--cache-to"),
        (["--compression", "zstd"], "--compression zstd"),
    ],
)
def test_buildkit_only_options_with_the_legacy_builder_are_refused_before_docker(
    matrix: Path, args: list[str], named: str
) -> None:
    result = invoke("build", "--matrix", str(matrix), "--builder", "sdk", *args)
    out = refused(result, f"{named} need BuildKit", "--builder buildx")
    assert "reached Docker" not in out
