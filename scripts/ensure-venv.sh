#!/usr/bin/env bash
# Make sure the project's virtualenv exists and holds imagekit with its dev extras.
# Works on a fresh Debian/Ubuntu machine with nothing but Python 3.11+ installed:
# where the venv module is missing and we are root, it installs python3-venv.
set -euo pipefail

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
cd "$(dirname "$0")/.."

# Whether every user of the machine can run Python $1: the venv's python is a link to it, so a
# venv made from a Python under a private folder (pyenv's under /root, mode 0700) gives
# everyone else "Permission denied", and a shared GPU server's users could not use the CLI an
# admin's `make demo` installed.
others_can_run() {
    local dir
    dir=$(dirname "$(readlink -f "$(command -v "$1")")") || return 1
    while [ "$dir" != / ]; do
        [ $(( 8#$(stat -c '%a' "$dir") & 1 )) -eq 1 ] || return 1
        dir=$(dirname "$dir")
    done
}
# The default python3 is replaced by the system's where only its owner can run it.
if [ "$PYTHON" = python3 ] && command -v python3 >/dev/null 2>&1 && ! others_can_run python3 \
    && [ -x /usr/bin/python3 ] && others_can_run /usr/bin/python3 \
    && /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "ensure-venv: $(readlink -f "$(command -v python3)") is private to its owner; using /usr/bin/python3 ($(/usr/bin/python3 -V 2>&1)) so that every user can run the venv" >&2
    PYTHON=/usr/bin/python3
fi
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "ensure-venv: $PYTHON not found; install Python 3.11 or newer" >&2
    exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "ensure-venv: imagekit needs Python >= 3.11; $PYTHON is $("$PYTHON" -V 2>&1)" >&2
    echo "ensure-venv: run make with PYTHON=/path/to/python3.11" >&2
    exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PYTHON" -m venv "$VENV" 2>/dev/null; then
        rm -rf "$VENV"
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "ensure-venv: installing python3-venv" >&2
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
            "$PYTHON" -m venv "$VENV"
        else
            echo "ensure-venv: '$PYTHON -m venv' failed; install your distribution's python3-venv" >&2
            exit 1
        fi
    fi
fi
echo "ensure-venv: installing imagekit and its dev extras into $VENV" >&2
# uv, not pip: 6 s against 37 s on two cores (scripts/install.sh says why and how).
PYTHON="$VENV/bin/python" scripts/install.sh -e '.[dev]'
touch "$VENV/.imagekit-installed"
