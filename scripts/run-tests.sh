#!/usr/bin/env bash
# The whole test suite, as `make test` runs it, in two pytest sessions at the same time:
# - in the foreground, the integration tests against the default engine, and those that run
#   beside it as a user of this machine would (rootless Podman 4.3 and 5 as a real account);
# - in the background, the tests against engines they start themselves (the engine contract on
#   boxed Docker 26 with each store, Podman 4.3 and boxed Podman 5; the registry-cache builds;
#   an engine killed under build and verify, a fake CDI GPU; the set-up in pristine Debian 12
#   and 13 boxes), then the unit tests that run torch here (marker host_torch), and last those on
#   the default engine that need nothing the foreground builds (marker beside: bake, whose slim
#   repeats the demo build's steps and takes them from BuildKit's cache by then; ci.yml's unit
#   job under act).
# The other unit tests run once, in that job: test_act.py runs ci.yml's unit job (lint, types,
# unit tests, on a fresh venv of a snapshot of this tree) under act, as GitHub runs it.
# That job has no torch, so it skips the host_torch tests; running the unit tests here as well
# cost the background session 4.5 minutes for nothing new.
# The split keeps the two about as long as each other (measured from a fresh clone on this
# 2-core machine, Docker 26 with the containerd store, 2026-12-06, at 01a44c4: 28:57
# foreground, 27:49 background, the CPUs 85 % busy; each session's JUnit file has every test's
# time).
# Both spend much of their time waiting on engines, registries and services, so together they
# take about as long as the integration tests alone. The background session's output is
# printed when both are done, then the foreground session's short summary again, so that the
# last lines of the output (all a CI log may keep) name what failed in either session. The
# exit status is the first failure's. pytest's "no tests ran" (5) is a failure like any other.
set -uo pipefail

PYTEST=${PYTEST:-.venv/bin/pytest}
PYTHON=$(dirname "$PYTEST")/python
CONTRACT=tests/integration/test_engine_contract.py
log=$(mktemp -t imagekit-contract.XXXXXX.log)
mainlog=$(mktemp -t imagekit-main.XXXXXX.log)

# Before any test: what a killed run left on the engine goes, the disk must have room for the
# suite's peak (the build cache is trimmed where it is short), and this run is written down (its pid, the
# dangling images now) for the next run to find (tests/integration/leftovers.py). A run still
# alive on the same engine stops this one.
# Both sessions build on the default engine: neither sweeps the dangling build stages at its
# end, where it would take those of a build the other is in the middle of; this script does,
# once both are done (tests/integration/sweep.py).
export IMAGEKIT_TEST_SWEEP=0
"$PYTHON" -m tests.integration.runs before $$ || exit 1
sweep() { "$PYTHON" -m tests.integration.runs after; }

# The disk's low point during the run, printed at its end: the figure behind the room the start
# asks for (leftovers.MIN_FREE_GB). Sampled every 15 s on the temporary folder's and the
# engine's filesystems.
lowest=$(mktemp -t imagekit-disk.XXXXXX)
watch_disk() {
    local root least="" now
    root=$(docker info -f '{{.DockerRootDir}}' 2>/dev/null || true)
    [ -d "$root" ] || root=/
    while :; do
        now=$(df -B1 --output=avail "${TMPDIR:-/tmp}" "$root" | tail -n +2 | sort -n | head -n 1)
        if [ -z "$least" ] || [ "$now" -lt "$least" ]; then
            least=$now
            echo "$least" >"$lowest"
        fi
        sleep 15
    done
}
watch_disk &
watcher=$!
# And how busy the CPUs were over the whole run (/proc/stat's counters at its start and end):
# the figure that says whether a third session could shorten the run, or only slow the two.
cpu_at_start=$(head -n 1 /proc/stat)
cpu_report() {
    local now
    now=$(head -n 1 /proc/stat)
    # Fields 2-11: user nice system idle iowait irq softirq steal guest guest_nice; idle and
    # iowait are the idle time, guest time is counted in user already.
    awk -v a="$cpu_at_start" -v b="$now" -v cores="$(nproc)" 'BEGIN {
        split(a, x); split(b, y); total = 0; idle = 0
        for (i = 2; i <= 9; i++) total += y[i] - x[i]
        idle = (y[5] - x[5]) + (y[6] - x[6])
        if (total > 0) printf "---- CPU: %d%% busy on %d cores over the run ----\n", 100 * (total - idle) / total, cores
    }'
}
disk_report() {
    kill "$watcher" 2>/dev/null
    [ -s "$lowest" ] && echo "---- disk: the least free during the run: $(($(cat "$lowest") / 1000000000)) GB ----"
    rm -f "$lowest"
    cpu_report
}

# --durations: the slowest tests of each session, so that the suite's cost stays visible; every
# test's time (and outcome) is in each session's JUnit file among the test artifacts.
artifacts=results/test-artifacts
mkdir -p "$artifacts"
# A background command of a script starts with SIGINT ignored (bash does that without job
# control), and Python then installs no KeyboardInterrupt handler: Ctrl-C reached only the
# running test's children, and the session went on to the next test. SIGINT is given back its
# default before pytest starts, so stop_contract's SIGINT ends the session and its fixtures
# stop the engines they started.
default_sigint=(
    "$PYTHON" -c
    'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])'
)
"${default_sigint[@]}" "$PYTEST" -p no:cacheprovider --durations=25 \
    --junitxml="$artifacts/engines-and-unit.xml" \
    -m "contract or beside or host_torch" >"$log" 2>&1 &
contract=$!
stop_contract() { kill -INT "$contract" 2>/dev/null; wait "$contract" 2>/dev/null; }
trap 'stop_contract; sweep; disk_report; rm -f "$log" "$mainlog"; exit 130' INT TERM

"$PYTEST" --durations=25 --junitxml="$artifacts/integration.xml" \
    -m "integration and not contract and not beside and not cuda and not arm64" "$@" 2>&1 |
    tee "$mainlog"
main=${PIPESTATUS[0]}
wait "$contract"
engines=$?
trap - INT TERM
sweep

echo "---- tests on engines of their own ($CONTRACT and others: boxed Docker 26 and Podman 5, Podman 4.3), host-mode torch unit tests ----"
cat "$log"
# pytest's own summary section (-ra) of the foreground session, from its header to the end.
echo "---- integration tests, again: ----"
if grep -q 'short test summary info' "$mainlog"; then
    sed -n '/short test summary info/,$p' "$mainlog"
else
    tail -n 1 "$mainlog"
fi
rm -f "$log" "$mainlog"
# Where the time went, module by module (each session's JUnit file), for whoever trims the suite.
"$PYTHON" scripts/slowest-modules.py "$artifacts/integration.xml" "$artifacts/engines-and-unit.xml"
disk_report
[ "$main" -ne 0 ] && exit "$main"
exit "$engines"
