"""Verifying images: probes, inspection, levels, the verify use case and its reports."""
