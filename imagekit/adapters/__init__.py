"""Adapters: the only code that talks to the world (the Docker engine, registries,
subprocesses, the GPU host, the results folder). Each translates its failures into imagekit
errors with a hint."""
