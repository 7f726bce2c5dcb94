#!/bin/bash
# imagekit full image entrypoint: starts what is asked for, as whatever user the container runs as.
#
#   (no arguments) | jupyter   JupyterLab on 8888 (token from JUPYTER_TOKEN, else a random one)
#   ssh                        sshd on 2222, key-only (keys: /etc/imagekit/authorized_keys or
#                              $SSH_AUTHORIZED_KEYS), with StrictModes
#   tensorboard                TensorBoard on 6006 reading $TENSORBOARD_LOGDIR (/workspace/runs);
#                              it has no authentication (see the warning it logs)
#   services                   every service named in $IMAGEKIT_SERVICES (e.g. "jupyter,ssh");
#                              one that cannot start (sshd without a key) is left out, the others
#                              run; when one that started ends, the others are stopped too
#   shell | bash               an interactive shell
#   anything else              run as a command
#
# It runs under tini (PID 1). The image starts it as root with the group nogroup (USER
# 0:65534, which no one types), for one decision only: which user runs everything (see
# become_workspace_user). `--user` is used exactly as given: `--user 0:0` (or `--user root`)
# runs as root, any other `--user UID:GID` as that uid; a user unknown to /etc/passwd (or whose
# home there is not its own) gets an entry through nss_wrapper with a private home, so no "I
# have no name!", and sshd accepts that home.
set -euo pipefail

STATE_DIR=/tmp/imagekit

log() { echo "imagekit: $*" >&2; }

# --- started by the image: whose container is it? ------------------------------------------
# `docker run -v $(pwd):/workspace IMAGE` must save files that belong to the host user who
# owns that folder, without --user: so the container takes the folder's owner's uid and gid
# (the image's user is renumbered to them, so its name, home and `docker exec -u NAME` agree).
# A folder that belongs to root and that the image's user cannot write (a root host user's
# project, the usual case on a GPU server) is served as root, as PyTorch's and NVIDIA's images
# do, and one line says so; IMAGEKIT_ALLOW_ROOT=1 asks for root whatever the folder.
adopt_ids() {
    local name=$1 uid=$2 gid=$3 holder
    holder=$(getent passwd "$uid" | cut -d: -f1 || true)
    # A uid that already has a name (a system user) is used as it is, under that name.
    [ -z "$holder" ] || [ "$holder" = "$name" ] || return 0
    getent group "$gid" >/dev/null || groupadd --gid "$gid" "host$gid"
    usermod --uid "$uid" --gid "$gid" "$name" >/dev/null
    chown -R "$uid:$gid" /run/imagekit/ssh
}

# Become root proper (group root, root's groups), saying why in one line.
become_root() {
    log "$1"
    shift
    exec setpriv --reuid 0 --regid 0 --init-groups env IMAGEKIT_ENTRY_DECIDED=1 "$0" "$@"
}

become_workspace_user() {
    local name=${IMAGEKIT_USER:-ml} uid gid owner group
    uid=$(id -u "$name") gid=$(id -g "$name")
    read -r owner group < <(stat -c '%u %g' /workspace)
    if [ "$owner" != 0 ]; then
        uid=$owner
        [ "$group" = 0 ] || gid=$group
        [ "$uid:$gid" = "$(id -u "$name"):$(id -g "$name")" ] || adopt_ids "$name" "$uid" "$gid"
    elif ! setpriv --reuid "$uid" --regid "$gid" --init-groups test -w /workspace 2>/dev/null; then
        become_root "running as root: /workspace belongs to root and $name ($uid:$gid) cannot write to it, so what is saved there stays root's, like the folder (to run as a user: mount a folder that user owns, or pass --user UID:GID)" "$@"
    fi
    if ! setpriv --reuid "$uid" --regid "$gid" --init-groups true 2>/dev/null; then
        log "cannot become $uid:$gid (the container lacks CAP_SETUID/CAP_SETGID): start it with --user $uid:$gid"
        exit 1
    fi
    exec setpriv --reuid "$uid" --regid "$gid" --init-groups --inh-caps=-all -- "$0" "$@"
}

if [ -n "${IMAGEKIT_ENTRY_DECIDED:-}" ]; then
    unset IMAGEKIT_ENTRY_DECIDED  # root, decided above: nothing to decide again
elif [ "$(id -u):$(id -g)" = 0:65534 ]; then
    if [ "${IMAGEKIT_ALLOW_ROOT:-0}" = 1 ]; then
        become_root "running as root because IMAGEKIT_ALLOW_ROOT=1: files written to /workspace belong to root" "$@"
    fi
    become_workspace_user "$@"
elif [ "$(id -u)" = 0 ]; then
    log "running as root, as --user asked: files written to /workspace belong to root"
fi

mkdir -p "$STATE_DIR"
: >"$STATE_DIR/services"
# Who the services run as, for `imagekit run` (which prints how to reach them) and for people.
id -un >"$STATE_DIR/user" 2>/dev/null || id -u >"$STATE_DIR/user"

# Docker gives a container 64 MB of /dev/shm unless told otherwise; DataLoader workers and NCCL
# die on that with bus errors. Said once, here; Python's own start-up check stands down.
shm_kib=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $2}' || true)
if [ -n "$shm_kib" ] && [ "$shm_kib" -lt 1048576 ] && [ "${IMAGEKIT_SHM_CHECK:-1}" != 0 ]; then
    log "WARNING: /dev/shm is $((shm_kib / 1024)) MiB (under 1 GiB): DataLoader workers and NCCL fail on it. Start the container with --shm-size 2g (or --ipc=host); IMAGEKIT_SHM_CHECK=0 silences this line."
fi
export IMAGEKIT_SHM_CHECK=0

# --- user mapping ------------------------------------------------------------------------
uid=$(id -u)

# Whether folder $1 passes sshd's StrictModes test: owned by root or by us, and writable by
# neither group nor others.
private_enough() {
    local owner mode
    read -r owner mode < <(stat -Lc '%u %a' "$1" 2>/dev/null) || return 1
    { [ "$owner" = 0 ] || [ "$owner" = "$uid" ]; } && (( (8#$mode & 8#022) == 0 ))
}

# A home of our own under /tmp: /tmp/home-UID made now (0700), or kept from a restart when it
# is ours and private; otherwise (someone else made that name) a fresh unpredictable one.
private_home() {
    local home="/tmp/home-$uid"
    if mkdir -m 0700 "$home" 2>/dev/null \
        || { [ -d "$home" ] && [ ! -L "$home" ] && [ -O "$home" ] && private_enough "$home"; }; then
        echo "$home"
    else
        mktemp -d "/tmp/home-$uid.XXXXXX"
    fi
}

entry=$(getent passwd "$uid" 2>/dev/null || true)
pw_name=$(cut -d: -f1 <<<"$entry")
pw_home=$(cut -d: -f6 <<<"$entry")
if [ -n "$entry" ] && [ -d "$pw_home" ] && [ -O "$pw_home" ]; then
    # A user of the image with a home of its own (the image's user): as it is.
    [ -w "${HOME:-/nonexistent}" ] || export HOME="$pw_home"
else
    # Unknown to /etc/passwd, or its home there is not its own (nobody's /nonexistent, the
    # image user's /home/ml for --user 1010:100): a home of its own, $HOME if that is one
    # (-e HOME=...), else a private one, and a passwd entry that says so, for every program
    # that asks (sshd checks the keys' folders up to that home).
    home=${HOME:-}
    if [ -z "$home" ] || [ ! -d "$home" ] || [ ! -O "$home" ] || [ ! -w "$home" ]; then
        home=$(private_home)
    fi
    wrapper=$(find /usr/lib -name libnss_wrapper.so 2>/dev/null | head -n 1)
    if [ -n "$wrapper" ]; then
        { grep -v "^[^:]*:[^:]*:$uid:" /etc/passwd || true
          echo "${pw_name:-user}:x:$uid:$(id -g):imagekit user:$home:/bin/bash"; } \
            >"$STATE_DIR/passwd"
        export NSS_WRAPPER_PASSWD="$STATE_DIR/passwd" NSS_WRAPPER_GROUP=/etc/group
        export LD_PRELOAD="$wrapper${LD_PRELOAD:+:$LD_PRELOAD}" USER="${pw_name:-user}"
    fi
    export HOME="$home"
    # `docker exec` starts beside this script, not under it: its shells read this file
    # (/etc/imagekit/exec-env.sh, through BASH_ENV and bash.bashrc) to get the same name and
    # home. Only a process of this uid reads it (the file is its own).
    declare -p HOME USER LD_PRELOAD NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP 2>/dev/null \
        | sed 's/^declare -[a-z-]* /export /' >"$STATE_DIR/exec-env" || true
fi
case ":$PATH:" in *":$HOME/.local/bin:"*) ;; *) export PATH="$HOME/.local/bin:$PATH" ;; esac
export XDG_CACHE_HOME="${XDG_CACHE_HOME:-$HOME/.cache}" JUPYTER_RUNTIME_DIR="$STATE_DIR/jupyter"
mkdir -p "$XDG_CACHE_HOME"

# --- services ----------------------------------------------------------------------------
start_jupyter() {
    local token=${JUPYTER_TOKEN:-}
    if [ -z "$token" ]; then
        token=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
        log "JUPYTER_TOKEN not set: generated one for this container"
    fi
    echo jupyter >>"$STATE_DIR/services"
    log "JupyterLab: http://127.0.0.1:${JUPYTER_PORT:-8888}/lab?token=$token"
    # The token travels in the environment, not on the command line (ps shows arguments).
    JUPYTER_TOKEN="$token" exec jupyter lab \
        --ip=0.0.0.0 --port="${JUPYTER_PORT:-8888}" --no-browser \
        --ServerApp.root_dir=/workspace --ServerApp.disable_check_xsrf=False \
        --ServerApp.allow_root="$([ "$uid" = 0 ] && echo True || echo False)" "$@"
}

# sshd runs with StrictModes: the keys' folder and every folder above it, up to the home
# sshd sees, must belong to root or to us and be writable by neither group nor others. /tmp
# (world-writable) never passes, so the keys live in /run/imagekit/ssh, made in the image for
# the image's user, or else in a private folder in the user's own home.
ssh_dir() {
    if [ -d /run/imagekit/ssh ] && [ -O /run/imagekit/ssh ]; then
        echo /run/imagekit/ssh
    else
        echo "$(getent passwd "$uid" | cut -d: -f6)/.imagekit-sshd"
    fi
}

# The first folder from $1 up to the home sshd sees (or /) that StrictModes would refuse.
strict_modes_refuses() {
    local dir home
    dir=$(realpath "$1") home=$(realpath "$(getent passwd "$uid" | cut -d: -f6)" 2>/dev/null || true)
    while :; do
        private_enough "$dir" || { echo "$dir"; return 0; }
        if [ "$dir" = "$home" ] || [ "$dir" = / ]; then
            return 1
        fi
        dir=$(dirname "$dir")
    done
}

# Everything sshd needs, made in the foreground, so a missing key is known before anything
# is started: 1 (and the log says why) when sshd cannot start.
prepare_sshd() {
    local keys="" bad setenv name
    [ -r /etc/imagekit/authorized_keys ] && keys+=$(cat /etc/imagekit/authorized_keys)$'\n'
    [ -n "${SSH_AUTHORIZED_KEYS:-}" ] && keys+="$SSH_AUTHORIZED_KEYS"$'\n'
    if ! grep -qE '^(ssh-|ecdsa-|sk-)' <<<"$keys"; then
        log "sshd NOT started: no authorized key (mount /etc/imagekit/authorized_keys or set SSH_AUTHORIZED_KEYS)"
        return 1
    fi
    SSHD_DIR=$(ssh_dir)
    [ -d "$SSHD_DIR" ] || mkdir -m 0700 "$SSHD_DIR" 2>/dev/null || true
    if bad=$(strict_modes_refuses "$SSHD_DIR"); then
        log "sshd NOT started: sshd's StrictModes refuses keys under $bad (it must belong to you or root and be writable by neither group nor others)"
        return 1
    fi
    if ! (umask 077 && printf '%s' "$keys" >"$SSHD_DIR/authorized_keys") \
        || ! chmod 0600 "$SSHD_DIR/authorized_keys"; then
        log "sshd NOT started: cannot write $SSHD_DIR/authorized_keys"
        return 1
    fi
    # Host keys never ship in the image: a mounted one is reused, otherwise one is made now
    # (and kept for a restart of this container).
    if [ -r /etc/imagekit/ssh_host_ed25519_key ]; then
        SSHD_HOST_KEY=/etc/imagekit/ssh_host_ed25519_key
    else
        SSHD_HOST_KEY="$SSHD_DIR/ssh_host_ed25519_key"
        [ -f "$SSHD_HOST_KEY" ] || ssh-keygen -q -t ed25519 -N '' -f "$SSHD_HOST_KEY" \
            || { log "sshd NOT started: cannot make a host key in $SSHD_DIR"; return 1; }
    fi
    setenv="SetEnv PATH=$PATH"
    for name in VIRTUAL_ENV CUDA_HOME LD_PRELOAD NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP LANG; do
        [ -n "${!name:-}" ] && setenv+=" $name=${!name}"
    done
    sed -e "s#@HOST_KEY@#$SSHD_HOST_KEY#" -e "s#@AUTHORIZED_KEYS@#$SSHD_DIR/authorized_keys#" \
        -e "s#@SETENV@#$setenv#" \
        -e "s#@PORT@#${SSH_PORT:-2222}#" -e "s#@PID@#$SSHD_DIR/sshd.pid#" \
        -e "s#@FORWARDING@#${IMAGEKIT_SSH_FORWARDING:-no}#g" \
        -e "s#@ROOT_LOGIN@#$([ "$uid" = 0 ] && echo prohibit-password || echo no)#" \
        -e "s#@USER@#$(id -un)#" \
        /etc/imagekit/sshd_config.in >"$SSHD_DIR/sshd_config"
}

run_sshd() {
    echo ssh >>"$STATE_DIR/services"
    log "sshd: ssh -p ${SSH_PORT:-2222} $(id -un)@HOST (key only; host key $(ssh-keygen -lf "$SSHD_HOST_KEY" | awk '{print $2}'); keys in $SSHD_DIR)"
    exec /usr/sbin/sshd -D -e -f "$SSHD_DIR/sshd_config"
}

# TensorBoard has no authentication of its own. It listens on every interface of the
# container (so `-p` can publish it) and says loudly what that means; TENSORBOARD_HOST=127.0.0.1
# keeps it inside the container, for an SSH tunnel.
start_tensorboard() {
    local logdir=${TENSORBOARD_LOGDIR:-/workspace/runs} port=${TENSORBOARD_PORT:-6006}
    local host=${TENSORBOARD_HOST:-} listen
    mkdir -p "$logdir" 2>/dev/null || true
    echo tensorboard >>"$STATE_DIR/services"
    case "$host" in
        ""|0.0.0.0|::) listen=(--bind_all) ;;
        *) listen=(--host "$host") ;;
    esac
    case "$host" in
        127.*|localhost|::1)
            log "TensorBoard listens on $host inside the container only (TENSORBOARD_HOST); reach it through an SSH tunnel (ssh -L $port:127.0.0.1:$port)" ;;
        *)
            log "WARNING: TensorBoard has NO authentication: whoever reaches port $port reads your runs. Publish it on 127.0.0.1 only (-p 127.0.0.1:$port:$port, as imagekit run does) or behind an authenticating proxy, or set TENSORBOARD_HOST=127.0.0.1 and reach it through an SSH tunnel." ;;
    esac
    log "TensorBoard: http://127.0.0.1:$port/ (logdir $logdir)"
    exec tensorboard --logdir "$logdir" "${listen[@]}" --port "$port"
}

start_many() {
    local services=${IMAGEKIT_SERVICES:-jupyter} pids=() name status=0 stopping=
    for name in ${services//,/ }; do
        case "$name" in
            jupyter|ssh|sshd|tensorboard) ;;
            *) log "unknown service '$name' (jupyter, ssh, tensorboard)"; exit 2 ;;
        esac
    done
    for name in ${services//,/ }; do
        case "$name" in
            jupyter) start_jupyter & pids+=($!) ;;
            # Without a key only sshd stays down (prepare_sshd logs why); the others run.
            ssh|sshd) if prepare_sshd; then run_sshd & pids+=($!); fi ;;
            tensorboard) start_tensorboard & pids+=($!) ;;
        esac
    done
    if [ "${#pids[@]}" -eq 0 ]; then
        log "no service started"
        exit 1
    fi
    trap 'stopping=1; kill "${pids[@]}" 2>/dev/null' TERM INT
    wait -n "${pids[@]}" || status=$?
    # A service that started and then ended takes the container with it, so that `docker ps`
    # and restart policies see it; the others stop cleanly first.
    if [ -z "$stopping" ]; then
        log "a service ended (status $status): stopping the others"
        kill "${pids[@]}" 2>/dev/null || true
    fi
    wait || true
    exit "$status"
}

case "${1:-jupyter}" in
    jupyter|lab) shift || true; start_jupyter "$@" ;;
    ssh|sshd) prepare_sshd || exit 1; run_sshd ;;
    tensorboard) start_tensorboard ;;
    services) start_many ;;
    shell|bash) shift || true; exec /bin/bash "$@" ;;
    *) exec "$@" ;;
esac
