#!/usr/bin/env bash
# What the engine-contract tests need besides the default engine (make test): Debian 12's
# Podman 4.3 (its Docker API, started by the tests on a socket of their own) with catatonit,
# the init it runs as PID 1 (Debian does not pull it in when tini is installed), iproute2
# for the boxed dockerd's bridge, and what rootless Podman needs for a non-root account:
# newuidmap/newgidmap (uidmap) and slirp4netns for its network; and what the HPC tests run.
# The tests start and stop the extra engines themselves.
# Root on Debian/Ubuntu installs what is missing; anywhere else, say what to install.
set -euo pipefail

say() { echo "ensure-test-engines: $*" >&2; }

missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
[ -x /usr/libexec/podman/catatonit ] || command -v catatonit >/dev/null 2>&1 || missing+=(catatonit)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v newuidmap >/dev/null 2>&1 || missing+=(uidmap)
command -v slirp4netns >/dev/null 2>&1 || missing+=(slirp4netns)
# The audit tests sign a security suite of their own with a throwaway key.
command -v gpg >/dev/null 2>&1 || missing+=(gnupg)
# The HPC tests: Charliecloud's ch-run and ch-fromhost, mksquashfs for `imagekit export`, and
# the Slurm controller, client and munge that tests/integration/hpc.py starts (its compute
# nodes are boxes with their own). No systemd here: nothing starts until a test does.
command -v ch-run >/dev/null 2>&1 || missing+=(charliecloud)
command -v mksquashfs >/dev/null 2>&1 || missing+=(squashfs-tools)
command -v slurmctld >/dev/null 2>&1 || missing+=(slurmctld)
command -v sbatch >/dev/null 2>&1 || missing+=(slurm-client)
command -v munged >/dev/null 2>&1 || missing+=(munge)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    say "the engine-contract tests need: ${missing[*]}; install them, then run make test again"
    exit 1
fi
# Bookworm's podman: trixie's 5.4 would upgrade glibc and systemd (the trixie source is
# pinned low, so it is never chosen here).
say "installing ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
