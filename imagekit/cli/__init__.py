"""The `imagekit` command line: parse options, call one function, print, map errors to exit codes.

stdout carries data (tables, `--json`); stderr carries messages for people.
Expected failures print one message with a hint and exit with their kind's code;
`--debug` adds the traceback. Each module registers its commands on the one app;
none imports docker or jinja2 at start-up (`imagekit probe` runs without them).
"""

from __future__ import annotations

import contextlib
import sys
from importlib import import_module

from imagekit.cli.common import app, interrupted_code, say

# Each module registers its commands; this order is the order `imagekit --help` lists them.
_MODULES = ("matrix", "build", "verify", "export", "audit", "publish", "attest", "run", "doctor")
for _module in _MODULES:
    import_module(f"imagekit.cli.{_module}")

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point."""
    from imagekit.cli.signals import install

    install()
    try:
        app()
    except KeyboardInterrupt as exc:
        with contextlib.suppress(OSError):  # a closed terminal (SIGHUP) cannot be told
            say("interrupted")
        sys.exit(interrupted_code(exc))
