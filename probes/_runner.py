"""Run several probes in one Python process (one `import torch`), one JSON line per event.

Usage: python _runner.py --device auto|cpu|cuda --probes env,autograd [--expected JSON]
       [--nonce-file FILE]

Prints `{"event": "device", ...}` once, then `{"event": "start", "probe": NAME, ...}`
before each probe and `{"event": "result", "probe": NAME, ...}` after it, flushing each
line, so that the host keeps every finished result even if a later probe hangs or kills the
process. Every line carries the nonce read from `--nonce-file` (the file is removed before any
probe runs), and only the runner writes to stdout: the probes' own output goes to stderr.
A probe's name is its file's name (`matmul` is `matmul.py` in this folder), and the result
carries that name. Exits with the worst of the probes' exit codes (see
`_probekit.EXIT_CODES`). Standard library only (torch is imported by the probes).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _probekit import EXIT_CODES, error, skip  # noqa: E402 - needs the path above

# The channel the host reads: the process's stdout as it started. Anything a probe (or a DDP
# rank, or a library) prints goes to stderr instead (see `own_channel`), and every event carries
# the run's nonce, which the host made and no probe can see before it starts: a line a probe
# prints cannot be taken for an event, and no probe can report for another.
CHANNEL = sys.stdout
NONCE = ""


def emit(event: dict[str, Any]) -> None:
    CHANNEL.write(json.dumps({**event, "nonce": NONCE}, sort_keys=True) + "\n")
    CHANNEL.flush()


def own_channel() -> Any:
    """Keep stdout for events and send file descriptor 1 (what probes inherit) to stderr."""
    sys.stdout.flush()
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return channel


def read_nonce(path: str) -> str:
    """The nonce the host left in `path`, which is then removed so no probe can read it."""
    if not path:
        return ""
    with open(path, encoding="utf-8") as handle:
        nonce = handle.read().strip()
    os.unlink(path)
    return nonce


def load(name: str) -> Any:
    """The probe module of `{HERE}/{name}.py`; files starting with `_` are not probes."""
    path = os.path.join(HERE, f"{name}.py")
    if name.startswith(("_", ".")) or os.sep in name or not os.path.isfile(path):
        raise ImportError(f"no probe named {name!r} in {HERE}")
    spec = importlib.util.spec_from_file_location(f"imagekit_probe_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no probe named {name!r} in {HERE}")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs, as an import would: dataclasses and pickling look it up there.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def pick_device(asked: str) -> tuple[str, str]:
    """The device to use and why; `auto` means cuda when a GPU is visible."""
    if asked != "auto":
        return asked, f"asked for {asked}"
    try:
        import torch

        if torch.cuda.is_available():
            return "cuda", f"{torch.cuda.device_count()} GPU(s) visible"
        return "cpu", "no GPU visible"
    except Exception as exc:
        return "cpu", f"torch did not import: {exc}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--probes", required=True)
    parser.add_argument("--expected", default="{}")
    parser.add_argument("--nonce-file", default="")
    args = parser.parse_args()
    global CHANNEL, NONCE
    NONCE = read_nonce(args.nonce_file)
    CHANNEL = own_channel()
    expected = json.loads(args.expected)
    device, why = pick_device(args.device)
    emit({"event": "device", "device": device, "reason": why})
    worst = 0
    for name in [p for p in args.probes.split(",") if p]:
        emit({"event": "start", "probe": name, "time": time.time()})
        try:
            module = load(name)
            needs_gpu = bool(getattr(module, "PROBE", {}).get("needs_gpu"))
            if needs_gpu and not device.startswith("cuda"):
                report = skip(name, f"needs a GPU; running on {device} ({why})")
            else:
                report = module.run(device, expected)
            if not isinstance(report, dict) or report.get("status") is None:
                raise TypeError(f"probe {name} returned no report")
        except Exception as exc:
            report = error(name, exc)
        # The name the probe was loaded by, whatever the report says: it is its file's name.
        emit({"event": "result", **report, "probe": name})
        worst = max(worst, EXIT_CODES.get(report["status"], EXIT_CODES["error"]))
    return worst


if __name__ == "__main__":
    sys.exit(main())
