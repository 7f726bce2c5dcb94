"""Adapter: a CycloneDX SBOM of a Python environment, written by `cyclonedx-py`."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from imagekit.errors import PublishError


class CycloneDx:
    """The `SbomMaker` port over the `cyclonedx-py` command of this Python environment."""

    def python_sbom(self, requirements: str) -> dict[str, Any]:
        """The SBOM of pinned `name==version` lines, reproducible (no serial, no timestamp)."""
        command = [
            sys.executable,
            "-m",
            "cyclonedx_py",
            "requirements",
            "--of",
            "JSON",
            "--output-reproducible",
            "-",
        ]
        try:
            done = subprocess.run(
                command, input=requirements, capture_output=True, text=True, check=True, timeout=120
            )
        except (subprocess.SubprocessError, OSError) as exc:
            raise PublishError(
                f"cyclonedx-py could not write the SBOM: {exc}", "reinstall imagekit's extras"
            ) from None
        document: dict[str, Any] = json.loads(done.stdout)
        return document
