"""The image's environment where runtimes without Docker look for it. Pure.

Under an HPC runtime the image's `ENV` does not apply by itself: the process runs as the
host's user with the host's environment. Each runtime reads the image's environment from a
file of its own, when it reads one at all:

- Charliecloud: `/ch/environment`, and only with `ch-run --set-env` (not a default);
- Apptainer: every `/.singularity.d/env/*.sh`, sourced in order at each start;
- enroot (and pyxis): `/etc/environment`, which `enroot import` writes from the `ENV`.

Images carry the three (templates/Dockerfile.j2), and `imagekit export` writes them from the
image's own configuration. Where none is read (`ch-run` without `--set-env`), the host's PATH
finds `python3` in /usr/local/bin, which the image links to its venv (`HOST_PATH_PYTHON`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import PurePosixPath

# HOME stays the host's: the runtimes give the user their own, and the image's user's home
# (/home/ml) is not theirs to write.
NOT_CARRIED = frozenset({"HOME"})
# Where the images link `python3` to the venv, so the host's PATH finds it first.
HOST_PATH_PYTHON = "/usr/local/bin/python3"
# A host's PATH as the runtimes pass it on (a login shell's on Debian, without the games).
HOST_PATH = "/usr/local/bin:/usr/bin:/bin"


class RuntimeFile(StrEnum):
    """The file each runtime reads the image's environment from."""

    CHARLIECLOUD = "/ch/environment"
    APPTAINER = "/.singularity.d/env/80-imagekit.sh"
    ENROOT = "/etc/environment"


def environment_of(env: Iterable[str]) -> dict[str, str]:
    """An image configuration's `Env` (`NAME=value` strings) as a mapping, in its order, less
    what the host keeps (`NOT_CARRIED`)."""
    pairs = (item.partition("=") for item in env)
    return {name: value for name, _, value in pairs if name and name not in NOT_CARRIED}


APPTAINER_HEAD = "# Written by imagekit: the image's ENV, for Apptainer (HOME stays the host's)."


def quoted(value: str) -> str:
    """`value` in single quotes for `sh`, as bash's `${var@Q}` writes it (so the files an image
    carries and those `imagekit export` writes are the same bytes)."""
    return "'" + value.replace("'", "'\\''") + "'"


def runtime_files(environment: Mapping[str, str]) -> dict[RuntimeFile, str]:
    """The content of each runtime's environment file for `environment`.

    Charliecloud's and enroot's files are `NAME=value` lines, read without a shell (values with
    a newline cannot be said there, and no image variable has one); Apptainer's is sourced by
    `sh`, so its values are quoted.
    """
    plain = "".join(f"{name}={value}\n" for name, value in environment.items())
    shell = "".join(f"export {name}={quoted(value)}\n" for name, value in environment.items())
    return {
        RuntimeFile.CHARLIECLOUD: plain,
        RuntimeFile.APPTAINER: f"{APPTAINER_HEAD}\n{shell}",
        RuntimeFile.ENROOT: plain,
    }


def build_commands(names: Sequence[str]) -> str:
    """bash that writes the three files of `runtime_files` at build time, from the values the
    build step sees for `names` (the image's ENV less `NOT_CARRIED`): a base's own PATH is
    known only there. One line of `&&`-joined commands, for a Dockerfile RUN."""
    carried = " ".join(n for n in names if n not in NOT_CARRIED)
    folders = sorted({str(PurePosixPath(f).parent) for f in RuntimeFile})
    return " && ".join(
        (
            f"install -d -m 0755 {' '.join(folders)}",
            f'for n in {carried}; do printf \'%s=%s\\n\' "$n" "${{!n}}"; done'
            f" > {RuntimeFile.CHARLIECLOUD}",
            f"cp {RuntimeFile.CHARLIECLOUD} {RuntimeFile.ENROOT}",
            f"{{ printf '%s\\n' {quoted(APPTAINER_HEAD)}; for n in {carried}; do"
            f' printf \'export %s=%s\\n\' "$n" "${{!n@Q}}"; done; }} > {RuntimeFile.APPTAINER}',
        )
    )
