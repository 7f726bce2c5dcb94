"""Waiting for the nodes of a multi-node run, as processes or as containers.

Every node is waited for within the run's time limit, except a node that has nothing left to
say: once some node has ended and every node still running has reported all its ranks, those
get only `linger_s` more. What such a node still runs is torchrun's exit: its agent waits at an
exit barrier on the first node's store for the agents of every other node, for a fixed 300 s.
An agent whose rank crashed in its own teardown after reporting never comes to that barrier
(measured here: one run in eleven, a gloo rank aborting at exit with "terminate called without
an active exception"), nor does one that lost the store in the barrier's race
(pytorch/pytorch#69520); either way the other node sat out the 300 s after its ranks had
passed. A node that has not reported is waited for in full: it may be about to say what went
wrong.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

# How often a running node is asked whether it has ended.
POLL_S = 0.25


def wait_for_nodes(
    ended: Sequence[Callable[[], int | None]],
    reported: Callable[[int], bool],
    *,
    timeout_s: float,
    linger_s: float,
    poll_s: float = POLL_S,
) -> list[int | None]:
    """Each node's exit code, from `ended` (a node's exit code, or None while it runs), asked
    until all have ended or the time is up: `timeout_s`, or `linger_s` after some node ended
    while every running node had `reported` (by its index) all its ranks. None: the node was
    still running then (the caller stops it)."""
    codes: list[int | None] = [None] * len(ended)
    deadline = time.monotonic() + max(0.0, timeout_s)
    lingering = False
    while True:
        for node, ask in enumerate(ended):
            if codes[node] is None:
                codes[node] = ask()
        now = time.monotonic()
        running = [node for node, code in enumerate(codes) if code is None]
        if not running or now >= deadline:
            return codes
        if not lingering and len(running) < len(codes) and all(map(reported, running)):
            lingering = True
            deadline = min(deadline, now + linger_s)
        time.sleep(max(0.0, min(poll_s, deadline - now)))
