"""Where the bundled templates/ and probes/ live.

In a wheel they are inside the package (`imagekit/_bundled/`, see pyproject.toml);
in a source checkout (editable install, tests) they are the repo's top-level
folders, which stay the single source of truth.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _bundled(name: str) -> Path:
    inside = _PACKAGE / "_bundled" / name
    if inside.is_dir():
        return inside
    checkout = _PACKAGE.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"imagekit is installed without its {name}/ folder")


def templates_dir() -> Path:
    """The folder holding Dockerfile.j2."""
    return _bundled("templates")


def site_templates_dir() -> Path:
    """The folder holding the run page's templates (`imagekit report --html`): package data,
    the same in a checkout and in a wheel."""
    return _PACKAGE / "data" / "site"


def probes_dir() -> Path:
    """The folder holding the probe scripts."""
    return _bundled("probes")
