"""Structure checks of the image's Python, run in the throw-away container of
adapters/structure.py: `import torch` is silent, and python3 is the venv's where HPC runtimes
look for it (verify/runtime_conventions.py decides)."""

from __future__ import annotations

from imagekit.adapters.testinfra_host import Host
from imagekit.kernel.labels import ImageLabels
from imagekit.kernel.records import Check
from imagekit.kernel.runtime import without_emulation_noise
from imagekit.verify.runtime_conventions import SCRIPT, parse_facts
from imagekit.verify.runtime_conventions import runtime_checks as conventions


def python_checks(labels: ImageLabels, user: Host, emulated: bool = False) -> list[Check]:
    """`import torch` is silent: no NumPy warning or anything else on stderr (under emulation,
    apart from what only emulation prints)."""
    if not labels.torch:
        return []
    run = user.run("python3 -c 'import torch'")
    said = run.stderr.strip()
    if emulated:
        said = without_emulation_noise(said).strip()
    return [
        Check(
            name="import torch prints nothing on stderr",
            ok=run.rc == 0 and not said,
            detail=said.splitlines()[0][:200] if said else f"exit {run.rc}, silent",
        )
    ]


def runtime_checks(labels: ImageLabels, user: Host, venv: str) -> list[Check]:
    """Where HPC runtimes look for the venv (verify/runtime_conventions.py)."""
    if not labels.torch:
        return []
    return conventions(parse_facts(user.run(SCRIPT).stdout), venv)
