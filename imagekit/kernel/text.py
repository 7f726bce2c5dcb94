"""Plain-text tables for people. Pure."""

from __future__ import annotations

from imagekit.kernel.records import BuildRecord


def table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell; no trailing spaces."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    )


def fitted(header: list[str], rows: list[list[str]], width: int) -> str:
    """`table`, where it fits in `width` columns; otherwise one block per row (its first cell,
    then each other column's name and value on a line), which fits any terminal."""
    wide = table(header, rows)
    if max((len(line) for line in wide.splitlines()), default=0) <= width:
        return wide
    pad = max(len(h) for h in header[1:]) if len(header) > 1 else 0
    blocks = [
        "\n".join(
            [row[0], *(f"  {h.ljust(pad)}  {c}" for h, c in zip(header[1:], row[1:], strict=True))]
        )
        for row in rows
    ]
    return "\n\n".join(blocks)


def build_table(results: list[BuildRecord]) -> str:
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
                "" if r.ok else r.message.splitlines()[0][:80],
            ]
        )
    return table(header, rows)
