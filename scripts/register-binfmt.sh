#!/usr/bin/env bash
# Register qemu's linux/arm64 interpreter with binfmt_misc, without systemd, and check it.
#
# trixie's qemu-user-static 10 is a transitional package: the interpreters come with qemu-user
# and the registration with qemu-user-binfmt, as systemd-binfmt files in /usr/lib/binfmt.d/
# (`:name:type:offset:magic:mask:interpreter:flags`, one a line). `update-binfmts` does not read
# those, and no systemd runs here to load them, so each line is written to the kernel's
# `register` file as systemd-binfmt would. Where only the older update-binfmts format exists
# (bookworm's qemu-user-static 7.2 in /usr/share/binfmts/), `update-binfmts --import` is used.
# `arch-test arm64` (what mmdebstrap asks before a foreign bootstrap) has the last word.
#
# Usage: register-binfmt.sh [NAME]   (NAME: the binfmt entry, qemu-aarch64 by default)
# Env:   BINFMT_MISC (default /proc/sys/fs/binfmt_misc), BINFMT_D (default /usr/lib/binfmt.d)
#        REGISTER_FRESH=1: drop an existing entry first (its interpreter was replaced: flag F
#        keeps the file the kernel opened at registration).
set -euo pipefail

NAME=${1:-qemu-aarch64}
MISC=${BINFMT_MISC:-/proc/sys/fs/binfmt_misc}
BINFMT_D=${BINFMT_D:-/usr/lib/binfmt.d}

say() { echo "register-binfmt: $*" >&2; }

[ -e "$MISC/register" ] || mount -t binfmt_misc binfmt_misc "$MISC" 2>/dev/null || {
    say "binfmt_misc is not mounted at $MISC and could not be mounted (needs root)"
    exit 1
}
if [ -n "${REGISTER_FRESH:-}" ] && [ -e "$MISC/$NAME" ]; then
    echo -1 >"$MISC/$NAME"
fi
if [ ! -e "$MISC/$NAME" ]; then
    line=""
    for conf in "$BINFMT_D/$NAME.conf" "$BINFMT_D"/*.conf; do
        [ -f "$conf" ] || continue
        line=$(grep -E "^:$NAME:" "$conf" | head -n 1 || true)
        [ -n "$line" ] && break
    done
    if [ -n "$line" ]; then
        # The register file takes one entry per write, exactly as the line reads.
        printf '%s' "$line" >"$MISC/register" || { say "the kernel refused $conf's line for $NAME"; exit 1; }
        say "registered $NAME from $conf"
    elif command -v update-binfmts >/dev/null 2>&1 && [ -f "/usr/share/binfmts/$NAME" ]; then
        update-binfmts --import "$NAME" >/dev/null 2>&1 || true
        update-binfmts --enable "$NAME" >/dev/null 2>&1 || true
        [ -e "$MISC/$NAME" ] && say "registered $NAME with update-binfmts"
    fi
fi
if [ ! -e "$MISC/$NAME" ]; then
    say "$NAME is not registered: no line for it in $BINFMT_D/*.conf or /usr/share/binfmts/"
    exit 1
fi
if command -v arch-test >/dev/null 2>&1 && [ "$NAME" = qemu-aarch64 ]; then
    if ! arch-test arm64 >/dev/null 2>&1; then
        say "$NAME is registered but arch-test arm64 says arm64 programs do not run"
        exit 1
    fi
fi
exit 0
