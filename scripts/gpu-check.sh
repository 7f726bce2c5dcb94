#!/usr/bin/env bash
# Run the probe suite in host mode on a machine with a GPU and no Docker, and write the
# results where asked. Needs only a Python with torch (and imagekit's own files: this
# checkout, or an installed imagekit wheel).
#
#   scripts/gpu-check.sh OUT_DIR [PYTHON]
#
# Writes OUT_DIR/probe-<gpu>.json (imagekit probe --json), OUT_DIR/doctor.json (imagekit doctor:
# this host's driver and GPUs against the CUDA example's labels) and OUT_DIR/nvidia-smi.txt.
set -euo pipefail

out=${1:?usage: scripts/gpu-check.sh OUT_DIR [PYTHON]}
python=${2:-python3}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"

gpu=$("$python" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no-gpu")' 2>/dev/null || echo unknown)
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | sed -E 's/[^a-z0-9]+/-/g; s/^-|-$//g')

{ command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv; } \
    >"$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi not available" >"$out/nvidia-smi.txt"

# PYTHONPATH makes the checkout importable without installing it (the GPU machine has typer,
# jinja2, pyyaml and pydantic but not necessarily docker; probe imports none of those it lacks).
set +e
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -m imagekit probe --device cuda \
    --json --out "$out/probe-$slug.json" >"$out/probe-$slug.stdout.json" 2>"$out/probe-$slug.stderr.txt"
code=$?
# doctor: would the CUDA example's images run on this host (driver, architectures)?
PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "$python" -m imagekit doctor \
    --matrix "$here/examples/cuda-local.yaml" --platform linux/amd64 --json >"$out/doctor.json" 2>"$out/doctor.stderr.txt"
doctor=$?
set -e
echo "gpu-check: $gpu: probes exit $code, doctor exit $doctor; results in $out" >&2
[ "$code" -eq 0 ] && [ "$doctor" -eq 0 ]
