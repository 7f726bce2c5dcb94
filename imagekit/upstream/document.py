"""`imagekit matrix refresh --json`: the proposal as one typed JSON document (`Proposal.document`
in `refresh.py`). Pure."""

from __future__ import annotations

from typing import TypedDict


class WheelJson(TypedDict):
    """A wheel a finding was read from."""

    filename: str
    sha256: str


class FindingJson(TypedDict):
    """One variant the proposal adds, as `--json` shows it."""

    torch: str
    variant: str
    files: list[str]
    cudnn: str | None
    nccl: str | None
    pins: dict[str, str]  # NVIDIA wheel -> its pinned version
    wheels: list[WheelJson]


class ProposalJson(TypedDict):
    """The proposal, as `--json` shows it."""

    findings: list[FindingJson]
    left_out: list[str]
    changed: list[str]
