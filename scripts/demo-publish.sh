#!/usr/bin/env bash
# The end of `make demo`: publish the verified CPU example to a throwaway local registry, signed
# with a throwaway cosign key, and check each published image with `imagekit attest verify`.
#
# Starts Debian's docker-registry on a free 127.0.0.1 port with a config in a temp folder,
# makes a key pair there with an empty COSIGN_PASSWORD, publishes (gated on the verify records
# in results/, as any publish), checks, then stops the registry and removes the folder, however
# it ends. Needs `make demo` (built and verified images) and `make engine` (docker-registry,
# cosign).
set -euo pipefail

BIN=${BIN:-.venv/bin}
MATRIX=${MATRIX:-examples/cpu.yaml}
RESULTS=${RESULTS:-results}

say() { echo "demo-publish: $*" >&2; }

for tool in docker-registry cosign; do
    command -v "$tool" >/dev/null 2>&1 || { say "$tool is missing; run make engine"; exit 1; }
done

tmp=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    # Publishing tagged the local images with this registry's name. The registry is gone now,
    # so those tags only kept about 4 GB of images alive after a `docker rmi` of the demo.
    if [ -n "${registry:-}" ]; then
        docker images --format '{{.Repository}}:{{.Tag}}' | grep -F "$registry/" \
            | xargs -r docker rmi >/dev/null 2>&1 || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

port=$("$BIN/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
registry="127.0.0.1:$port"
cat >"$tmp/config.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $tmp/data}}
http: {addr: $registry}
EOF
docker-registry serve "$tmp/config.yml" >"$tmp/registry.log" 2>&1 &
pid=$!
"$BIN/python" - "$registry" <<'EOF'
import sys, time, urllib.request
for _ in range(150):
    try:
        urllib.request.urlopen(f"http://{sys.argv[1]}/v2/", timeout=2)
        break
    except OSError:
        time.sleep(0.2)
else:
    sys.exit("demo-publish: docker-registry did not start")
EOF
say "registry on $registry (temporary)"

(cd "$tmp" && COSIGN_PASSWORD= cosign generate-key-pair >/dev/null 2>&1)
say "throwaway key pair: $tmp/cosign.key, $tmp/cosign.pub"

COSIGN_PASSWORD= "$BIN/imagekit" publish --matrix "$MATRIX" --registry "$registry" \
    --results "$RESULTS" --signing-key "$tmp/cosign.key"

refs=$("$BIN/imagekit" tags --matrix "$MATRIX" --registry "$registry" --json |
    "$BIN/python" -c 'import json, sys; print("\n".join(r["tag"] for r in json.load(sys.stdin) if r["kind"] == "versioned"))')
for ref in $refs; do
    echo "+ imagekit attest verify $ref --key cosign.pub --require-level cpu"
    "$BIN/imagekit" attest verify "$ref" --key "$tmp/cosign.pub" --require-level cpu
done
