"""The table of what a build made, for people. Pure."""

from __future__ import annotations

from typing import Any

from imagekit.kernel.text import table


def build_table(results: list[Any]) -> str:
    """The summary of a build run: one row per image with its outcome."""
    header = ["IMAGE", "STATUS", "SIZE", "BUDGET", "LAYERS", "TIME", "NOTE"]
    rows = []
    for r in results:
        rows.append(
            [
                r.name,
                r.status,
                f"{r.size_bytes / 1e9:.2f} GB" if r.size_bytes else "-",
                f"{r.size_budget_bytes / 1e9:.1f} GB" if r.size_budget_bytes else "-",
                str(r.layer_count) if r.layer_count is not None else "-",
                f"{r.duration_s:.0f}s",
                "" if r.status in ("built", "up-to-date") else r.message.splitlines()[0][:80],
            ]
        )
    return table(header, rows)
