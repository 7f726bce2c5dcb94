"""Adapter: what an image holds that an audit reads, from throw-away containers of it.

`/etc/os-release` and the dpkg database are read as they are (`cat`: no dpkg needed inside),
and the Python distributions through `importlib.metadata` of the image's own `python3` (the
venv's, first on its PATH). Each runs without network and is removed afterwards
(`DockerEngine.output_of`). An image whose dpkg database comes back empty is engine trouble,
never an image with nothing to fix.
"""

from __future__ import annotations

import json

from imagekit.adapters.engine import DockerEngine
from imagekit.audit.debian import installed_packages
from imagekit.audit.ports import ImageContents
from imagekit.errors import EngineError

DISTRIBUTIONS = (
    "import importlib.metadata as m, json;"
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()"
    " if d.metadata['Name']}))"
)


class EngineContents:
    """Reads images through the engine."""

    def __init__(self, engine: DockerEngine) -> None:
        self.engine = engine

    def contents(self, image_id: str) -> ImageContents:
        """`/etc/os-release`, `/var/lib/dpkg/status` and the Python distributions."""
        os_release = self.engine.output_of(image_id, ["cat", "/etc/os-release"])
        status = self.engine.output_of(image_id, ["cat", "/var/lib/dpkg/status"])
        if not installed_packages(status):
            raise EngineError(
                f"read no installed package from /var/lib/dpkg/status of {image_id[:19]}",
                "the engine returned no output of the container; run the audit again",
            )
        said = self.engine.output_of(image_id, ["python3", "-I", "-c", DISTRIBUTIONS]).strip()
        try:
            python = {str(k): str(v) for k, v in json.loads(said or "{}").items()}
        except (json.JSONDecodeError, AttributeError):
            raise EngineError(
                f"could not read the Python distributions of {image_id[:19]}: {said[-200:]!r}"
            ) from None
        return ImageContents(os_release, status, python)
