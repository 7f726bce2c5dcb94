"""Whether an image works where HPC runtimes run it, without its ENV. Pure.

Charliecloud, Apptainer and enroot run the host's user with the host's environment; each reads
the image's environment from a file of its own, or none (kernel/runtime_env.py). The structure
check runs `SCRIPT` in the image as a user with an empty environment and reads what `python3`
is under each convention: the venv's, or the base's (where `import torch` fails).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from imagekit.kernel.records import Check
from imagekit.kernel.runtime_env import HOST_PATH, RuntimeFile

# Each line `name=value`: what `python3` is (its sys.prefix) with the host's PATH alone, and
# which python3 each runtime's file puts first. `env -i`: nothing of the container's ENV.
SCRIPT = f"""
env -i PATH={HOST_PATH} HOME=/nonexistent python3 -c 'import sys; print("host-prefix=" + sys.prefix)' 2>/dev/null || echo host-prefix=
env -i PATH={HOST_PATH} HOME=/nonexistent python3 -c 'import torch' >/dev/null 2>&1 && echo host-torch=yes || echo host-torch=no
for f in {RuntimeFile.CHARLIECLOUD} {RuntimeFile.ENROOT}; do
  printf '%s=%s\\n' "$f" "$(env -i sh -c 'while IFS= read -r l; do case $l in *=*) export "$l";; esac; done < "$0" && command -v python3' "$f" 2>/dev/null)"
done
printf '%s=%s\\n' {RuntimeFile.APPTAINER} "$(env -i sh -c '. "$0" && command -v python3' {RuntimeFile.APPTAINER} 2>/dev/null)"
"""  # noqa: E501 (shell, read as one)


@dataclass(frozen=True)
class Convention:
    """One runtime's way to the image's environment, as a check names it."""

    runtime: str
    how: str  # where it reads the environment from
    remedy: str


CONVENTIONS = {
    RuntimeFile.CHARLIECLOUD: Convention(
        "Charliecloud", "ch-run --set-env reads /ch/environment", "ch-convert writes it"
    ),
    RuntimeFile.APPTAINER: Convention(
        "Apptainer", "sources /.singularity.d/env/*.sh", "apptainer build from docker-daemon://"
    ),
    RuntimeFile.ENROOT: Convention(
        "enroot", "reads /etc/environment", "enroot import writes it from a registry's image"
    ),
}


def parse_facts(output: str) -> dict[str, str]:
    """`SCRIPT`'s lines as a mapping (a line without `=` is ignored)."""
    pairs = (line.partition("=") for line in output.splitlines())
    return {name: value for name, sep, value in pairs if sep}


def runtime_checks(facts: Mapping[str, str], venv: str) -> list[Check]:
    """One check for a PATH without the venv (`ch-run` as it starts) and one per runtime file,
    from `SCRIPT`'s `facts`; `venv`: the image's (its VIRTUAL_ENV)."""
    prefix, torch = facts.get("host-prefix", ""), facts.get("host-torch") == "yes"
    checks = [
        Check(
            name="python3 on a host's PATH is the venv's (ch-run without --set-env)",
            ok=prefix == venv and torch,
            detail=f"PATH={HOST_PATH}: python3 is {venv}'s, import torch works"
            if prefix == venv and torch
            else f"PATH={HOST_PATH}: python3 is {prefix or 'missing'}'s, not the venv "
            f"{venv}'s{'' if torch else ', and import torch fails'}: the venv is not on "
            "PATH under a runtime that drops the image's ENV (rebuild with this imagekit: "
            f"it links python3 into /usr/local/bin)",
        )
    ]
    wanted = f"{venv}/bin/python3"
    for where, convention in CONVENTIONS.items():
        found = facts.get(str(where), "")
        checks.append(
            Check(
                name=f"{convention.runtime}'s {where} puts the venv first",
                ok=found == wanted,
                detail=f"{convention.how}: python3 is {found}"
                if found == wanted
                else f"{convention.how}: python3 is {found or 'not found'}, not {wanted} "
                f"({where} missing or without the venv; {convention.remedy}, and an image "
                "built by this imagekit carries it)",
            )
        )
    return checks
