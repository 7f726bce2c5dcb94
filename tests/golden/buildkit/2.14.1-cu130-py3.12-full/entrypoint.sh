#!/bin/bash
# imagekit full image entrypoint: starts what is asked for, as whatever user the container runs as.
#
#   (no arguments) | jupyter   JupyterLab on 8888 (token from JUPYTER_TOKEN, else a random one)
#   ssh                        sshd on 2222, key-only (keys: /etc/imagekit/authorized_keys or
#                              $SSH_AUTHORIZED_KEYS)
#   tensorboard                TensorBoard on 6006 reading $TENSORBOARD_LOGDIR (/workspace/runs)
#   services                   every service named in $IMAGEKIT_SERVICES (e.g. "jupyter,ssh")
#   shell | bash               an interactive shell
#   anything else              run as a command
#
# It runs under tini (PID 1), never as root by default, and works for any `--user UID:GID`:
# a user unknown to /etc/passwd gets an entry through nss_wrapper, so no "I have no name!".
set -euo pipefail

STATE_DIR=/tmp/imagekit
mkdir -p "$STATE_DIR"
: >"$STATE_DIR/services"

log() { echo "imagekit: $*" >&2; }

# --- user mapping ------------------------------------------------------------------------
if ! getent passwd "$(id -u)" >/dev/null 2>&1; then
    wrapper=$(find /usr/lib -name libnss_wrapper.so 2>/dev/null | head -n 1)
    if [ -n "$wrapper" ]; then
        home=${HOME:-/home/ml}
        [ -w "$home" ] || home="/tmp/home-$(id -u)"
        mkdir -p "$home"
        { cat /etc/passwd; echo "user:x:$(id -u):$(id -g):imagekit user:$home:/bin/bash"; } \
            >"$STATE_DIR/passwd"
        export NSS_WRAPPER_PASSWD="$STATE_DIR/passwd" NSS_WRAPPER_GROUP=/etc/group
        export LD_PRELOAD="$wrapper${LD_PRELOAD:+:$LD_PRELOAD}" HOME="$home" USER=user
    fi
fi
if [ ! -w "${HOME:-/nonexistent}" ]; then
    export HOME="/tmp/home-$(id -u)"
    mkdir -p "$HOME"
fi
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
        --ServerApp.allow_root=False "$@"
}

authorized_keys() {
    local out="$STATE_DIR/ssh/authorized_keys"
    mkdir -p "$STATE_DIR/ssh" && chmod 700 "$STATE_DIR/ssh"
    : >"$out"
    [ -r /etc/imagekit/authorized_keys ] && cat /etc/imagekit/authorized_keys >>"$out"
    [ -n "${SSH_AUTHORIZED_KEYS:-}" ] && printf '%s\n' "$SSH_AUTHORIZED_KEYS" >>"$out"
    chmod 600 "$out"
    grep -qE '^(ssh-|ecdsa-|sk-)' "$out"
}

start_sshd() {
    if ! authorized_keys; then
        log "sshd NOT started: no authorized key (mount /etc/imagekit/authorized_keys or set SSH_AUTHORIZED_KEYS)"
        return 1
    fi
    local dir="$STATE_DIR/ssh" key
    # Host keys never ship in the image: a mounted one is reused, otherwise one is made now.
    if [ -r /etc/imagekit/ssh_host_ed25519_key ]; then
        key=/etc/imagekit/ssh_host_ed25519_key
    else
        key="$dir/ssh_host_ed25519_key"
        [ -f "$key" ] || ssh-keygen -q -t ed25519 -N '' -f "$key"
    fi
    local setenv="SetEnv PATH=$PATH" name
    for name in VIRTUAL_ENV CUDA_HOME LD_PRELOAD NSS_WRAPPER_PASSWD NSS_WRAPPER_GROUP LANG; do
        [ -n "${!name:-}" ] && setenv+=" $name=${!name}"
    done
    sed -e "s#@HOST_KEY@#$key#" -e "s#@AUTHORIZED_KEYS@#$dir/authorized_keys#" \
        -e "s#@SETENV@#$setenv#" \
        -e "s#@PORT@#${SSH_PORT:-2222}#" -e "s#@PID@#$dir/sshd.pid#" \
        -e "s#@FORWARDING@#${IMAGEKIT_SSH_FORWARDING:-no}#g" \
        /etc/imagekit/sshd_config.in >"$dir/sshd_config"
    echo ssh >>"$STATE_DIR/services"
    log "sshd: ssh -p ${SSH_PORT:-2222} $(id -un)@HOST (key only; host key $(ssh-keygen -lf "$key" | awk '{print $2}'))"
    exec /usr/sbin/sshd -D -e -f "$dir/sshd_config"
}

start_tensorboard() {
    local logdir=${TENSORBOARD_LOGDIR:-/workspace/runs}
    mkdir -p "$logdir" 2>/dev/null || true
    echo tensorboard >>"$STATE_DIR/services"
    log "TensorBoard: http://127.0.0.1:${TENSORBOARD_PORT:-6006}/ (logdir $logdir)"
    exec tensorboard --logdir "$logdir" --bind_all --port "${TENSORBOARD_PORT:-6006}"
}

start_many() {
    local services=${IMAGEKIT_SERVICES:-jupyter} pids=() name
    for name in ${services//,/ }; do
        case "$name" in
            jupyter) start_jupyter & pids+=($!) ;;
            ssh|sshd) start_sshd & pids+=($!) ;;
            tensorboard) start_tensorboard & pids+=($!) ;;
            *) log "unknown service '$name' (jupyter, ssh, tensorboard)"; exit 2 ;;
        esac
    done
    trap 'kill "${pids[@]}" 2>/dev/null' TERM INT
    wait -n "${pids[@]}"
}

case "${1:-jupyter}" in
    jupyter|lab) shift || true; start_jupyter "$@" ;;
    ssh|sshd) start_sshd || exit 1 ;;
    tensorboard) start_tensorboard ;;
    services) start_many ;;
    shell|bash) shift || true; exec /bin/bash "$@" ;;
    *) exec "$@" ;;
esac
