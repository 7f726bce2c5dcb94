"""The pure core: matrix, compatibility data, plans, rendering, records and every decision.

Nothing here talks to Docker, a registry or a subprocess, and nothing prints: it reads and
writes only the files it is handed. `tests/test_layers.py` keeps it that way.
"""
