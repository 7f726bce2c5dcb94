#!/usr/bin/env bash
# Make sure a Docker engine answers, for `make demo` and `make test`.
#
# - A running engine (DOCKER_HOST or the default socket) is reused as it is.
# - Otherwise, as root on Debian/Ubuntu: install Docker 26 (trixie's docker.io and docker-cli,
#   the only two packages taken from the next Debian release, which is pinned at low priority)
#   and the docker-buildx plugin; switch on the containerd image store (what Docker 29 installs
#   fresh) unless /etc/docker/daemon.json already says otherwise; start dockerd in the
#   background and wait until it answers. No systemd is assumed. Where trixie's engine would
#   pull in more than those two packages, bookworm's docker.io (20.10) is installed instead.
# - Anywhere else: stop with instructions.
# Idempotent, and quiet when everything is already there.
set -euo pipefail

LOG=${IMAGEKIT_DOCKERD_LOG:-/var/log/imagekit-dockerd.log}
WAIT_S=${IMAGEKIT_DOCKERD_WAIT_S:-90}

say() { echo "ensure-engine: $*" >&2; }

engine_answers() { timeout 20 docker info >/dev/null 2>&1; }

apt_install() {
    if [ -z "${_APT_UPDATED:-}" ]; then
        apt-get update -qq
        _APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# The buildx plugin and cosign are not in bookworm; the next release has them, and they need
# only a newer libc6 (present; cosign is a static Go binary). Add that suite with the machine's
# own mirror and keyring, pinned so that nothing else is upgraded from it, and install PACKAGE
# from it.
add_trixie_source() {
    local src=/etc/apt/sources.list.d/imagekit-trixie.sources
    [ -f "$src" ] && return 0
    local uri keyring
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    keyring=$(awk '/^Signed-By:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    if [ -z "$uri" ]; then
        uri=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    fi
    if [ -z "$uri" ]; then
        say "no Debian source found to add trixie from"
        return 1
    fi
    {
        echo "Types: deb"
        echo "URIs: $uri"
        echo "Suites: trixie"
        echo "Components: main"
        [ -n "$keyring" ] && echo "Signed-By: $keyring"
    } >"$src"
    printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' \
        >/etc/apt/preferences.d/imagekit-trixie
    _APT_UPDATED=
}

install_from_trixie() {
    add_trixie_source || { say "skipping $1"; return 0; }
    apt_install -t trixie "$1"
}

install_buildx() { install_from_trixie docker-buildx; }

# The engine users run today: Docker 26. Debian 13 (trixie) has it as its own docker.io. On
# Debian 12 it would come from trixie, which the source above pins low; `apt-get -s` shows what
# it would install, and anything beyond docker.io and docker-cli (today: trixie's libc6, dpkg,
# containerd, runc, iptables and about 40 more) would half-upgrade the machine under the user.
# Then bookworm's own docker.io (20.10, end of life) is taken, and said so: the test suite runs
# the engines it needs beyond the host's (Docker 26, both stores) in boxes of their own.
ENGINE_PACKAGES="docker.io docker-cli"
major_of() { echo "$1" | sed -E 's/^[0-9]+://; s/^([0-9]+).*/\1/'; }
install_engine() {
    [ -n "${_APT_UPDATED:-}" ] || { apt-get update -qq && _APT_UPDATED=1; }
    local own extra="no trixie source"
    own=$(apt-cache policy docker.io 2>/dev/null | awk '/Candidate:/ {print $2; exit}')
    if [ -n "$own" ] && [ "$own" != "(none)" ] && [ "$(major_of "$own")" -ge 26 ]; then
        say "installing Docker $(major_of "$own") (this release's docker.io $own)"
        apt_install docker.io
    else
        if add_trixie_source; then
            [ -n "${_APT_UPDATED:-}" ] || { apt-get update -qq && _APT_UPDATED=1; }
            extra=$(apt-get -s install -t trixie --no-install-recommends $ENGINE_PACKAGES 2>/dev/null |
                awk '$1 == "Inst" {print $2}' | grep -v -x -e docker.io -e docker-cli | xargs || true)
        fi
        local why="trixie's Docker 26 would upgrade $(echo "$extra" | wc -w) more packages of this"
        why="$why machine (${extra%% *} ...)"
        if [ -z "$extra" ] && apt-cache policy docker-cli 2>/dev/null | grep -q trixie; then
            say "installing Docker 26 (trixie's docker.io and docker-cli)"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                -t trixie $ENGINE_PACKAGES >/dev/null
        elif command -v dockerd >/dev/null 2>&1; then
            say "keeping $(dockerd --version | cut -d, -f1): $why"
            return 0
        else
            say "installing this release's docker.io ${own:-?} (end of life): $why"
            apt_install docker.io
        fi
    fi
    apt_install iptables ca-certificates
}

# dockerd older than 26 that is not running (bookworm's 20.10, end of life) is upgraded.
engine_too_old() {
    local version
    version=$(dockerd --version 2>/dev/null | sed -E 's/^Docker version ([0-9]+).*/\1/')
    [ -n "$version" ] && [ "$version" -lt 26 ]
}

# The containerd image store (image ids are manifest digests, as on Docker 29's fresh
# installs), on engines that have it: Docker 26 and later. Docker 20.10 (what a Debian 12 host
# can take alone) ignores the setting, so it is not written there, and nothing claims it is on.
# A daemon.json someone wrote is theirs: it is left as it is.
DAEMON_JSON=/etc/docker/daemon.json
choose_image_store() {
    [ -e "$DAEMON_JSON" ] && return 0
    engine_too_old && return 0
    mkdir -p "$(dirname "$DAEMON_JSON")"
    echo '{"features": {"containerd-snapshotter": true}}' >"$DAEMON_JSON"
    say "containerd image store switched on in $DAEMON_JSON"
    # An engine upgraded from 20.10 keeps its classic store's layers on disk, where the
    # containerd store never looks: say what they take and how to get the room back (they are
    # the user's images, so nothing here removes them).
    local classic=/var/lib/docker/overlay2
    if [ -d "$classic" ] && [ -n "$(ls -A "$classic" 2>/dev/null)" ]; then
        say "the classic store's images stay in $classic ($(du -sh "$classic" 2>/dev/null | cut -f1)), unseen by the containerd store; to free the room, stop dockerd and remove $classic and /var/lib/docker/image"
    fi
}

# What the engine is and which image store it uses, in one line (every message names both).
engine_line() {
    docker info --format '{{.ServerVersion}} {{range .DriverStatus}}{{index . 0}}={{index . 1}};{{end}} {{.Driver}}' 2>/dev/null |
        awk '{ store = ($2 ~ /driver-type=io.containerd.snapshotter/) ? "containerd image store" : "classic image store";
               print "Docker " $1 ", " store " (" $NF ")" }'
}

# linux/arm64 on an x86_64 machine: qemu-user-static's interpreters, registered with
# binfmt_misc, run arm64 programs (flag F: the kernel opens the interpreter at registration, so
# it works inside containers and chroots too); arch-test is what mmdebstrap asks for before it
# bootstraps a foreign architecture. The registration is kernel state: a restarted machine
# needs it again, so it is checked on every run.
# qemu comes from trixie (10.0, static, nothing else upgraded): bookworm's 7.2 segfaults or
# hangs in `import torch` (oneDNN's start-up) for the aarch64 wheels.
QEMU_MIN_MAJOR=10
ensure_binfmt() {
    [ "$(uname -m)" = aarch64 ] && return 0
    for pkg in binfmt-support arch-test; do
        if ! dpkg -s "$pkg" >/dev/null 2>&1; then
            say "installing $pkg (linux/arm64 images under emulation)"
            apt_install "$pkg"
        fi
    done
    local fresh=
    local major
    major=$(dpkg-query -W -f '${Version}' qemu-user-static 2>/dev/null | sed -E 's/^[0-9]+://; s/\..*//')
    if [ -z "$major" ] || [ "$major" -lt "$QEMU_MIN_MAJOR" ]; then
        say "installing qemu-user-static $QEMU_MIN_MAJOR (trixie) for linux/arm64 under emulation"
        install_from_trixie qemu-user-static
        fresh=1
    fi
    # Registered from qemu-user-binfmt's binfmt.d files (no systemd here to load them); a new
    # qemu takes over only once registered again (flag F).
    REGISTER_FRESH=$fresh "$(dirname "$0")/register-binfmt.sh" qemu-aarch64 ||
        say "could not register qemu-aarch64 with binfmt_misc; make demo-arm64 needs it"
}

# Tools beside the engine: mmdebstrap makes the locally bootstrapped base images (imagekit base
# bootstrap); docker-registry is the real registry the publish tests start on 127.0.0.1; cosign
# signs and attests what publish pushes (--signing-key) and checks it (imagekit attest verify).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    for tool in mmdebstrap docker-registry; do
        if ! command -v "$tool" >/dev/null 2>&1; then
            say "installing $tool"
            apt_install "$tool"
        fi
    done
    # imagekit audit checks a security suite's InRelease with gpgv against the archive keyring.
    if ! command -v gpgv >/dev/null 2>&1 || [ ! -f /usr/share/keyrings/debian-archive-keyring.gpg ]; then
        say "installing gpgv and debian-archive-keyring"
        apt_install gpgv debian-archive-keyring
    fi
    if ! command -v cosign >/dev/null 2>&1; then
        say "installing cosign"
        install_from_trixie cosign || say "cosign could not be installed; signing needs it"
    fi
    # Only the arm64 targets (make demo-arm64, test-arm64) need it: never fatal for the rest.
    ensure_binfmt || say "linux/arm64 emulation could not be set up; make demo-arm64 needs it"
fi

if engine_answers; then
    exit 0
fi

if [ -n "${DOCKER_HOST:-}" ]; then
    say "DOCKER_HOST=$DOCKER_HOST does not answer; start that engine or unset DOCKER_HOST"
    exit 1
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    say "no Docker engine answers and this is not a root Debian/Ubuntu shell."
    say "start one (e.g. 'sudo systemctl start docker', Docker Desktop, or 'dockerd &')"
    say "or point DOCKER_HOST at one, then run make again."
    exit 1
fi

if ! command -v dockerd >/dev/null 2>&1 || engine_too_old; then
    install_engine
fi
choose_image_store
if ! docker buildx version >/dev/null 2>&1; then
    say "installing the docker-buildx plugin"
    install_buildx || say "docker-buildx could not be installed; the SDK builder still works"
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
    say "starting dockerd (log: $LOG)"
    # setsid: the daemon must outlive make and the shell that started it.
    setsid nohup dockerd >>"$LOG" 2>&1 </dev/null &
fi
for _ in $(seq "$WAIT_S"); do
    if engine_answers; then
        say "engine ready: $(engine_line)"
        exit 0
    fi
    sleep 1
done
say "dockerd did not answer within ${WAIT_S}s; last lines of $LOG:"
tail -n 20 "$LOG" >&2 || true
exit 1
