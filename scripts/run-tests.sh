#!/usr/bin/env bash
# The whole test suite, as `make test` runs it: the engine-contract tests (Docker's classic
# store and Podman, each started by the tests) in the background, everything else in the
# foreground against the default engine, at the same time. Both spend much of their time
# waiting on engines and registries, so together they take about as long as the longer one.
# The contract's output is printed when both are done; the exit status is the first failure's.
# pytest's "no tests ran" (5) is a failure like any other.
set -uo pipefail

PYTEST=${PYTEST:-.venv/bin/pytest}
CONTRACT=tests/integration/test_engine_contract.py
log=$(mktemp -t imagekit-contract.XXXXXX.log)

"$PYTEST" -p no:cacheprovider "$CONTRACT" >"$log" 2>&1 &
contract=$!
stop_contract() { kill -INT "$contract" 2>/dev/null; wait "$contract" 2>/dev/null; }
trap 'stop_contract; rm -f "$log"; exit 130' INT TERM

"$PYTEST" -m "not cuda" --ignore "$CONTRACT" "$@"
main=$?
wait "$contract"
engines=$?
trap - INT TERM

echo "---- engine contract ($CONTRACT: Docker classic store over tcp, Podman) ----"
cat "$log"
rm -f "$log"
[ "$main" -ne 0 ] && exit "$main"
exit "$engines"
