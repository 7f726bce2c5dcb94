"""Orchestration: sequences the core's decisions over the adapters' ports and emits progress
events. Never prints; the CLI shows the events."""
