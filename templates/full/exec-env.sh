# Sourced by every bash of a full image (BASH_ENV, /etc/bash.bashrc): a `docker exec` into a
# container started with `--user UID:GID` for a uid /etc/passwd does not know gets the name and
# home the entrypoint gave that uid. Only the file of the uid that runs is read, never one that
# another user could have written.
if [ -z "${NSS_WRAPPER_PASSWD:-}" ] && [ -f /tmp/imagekit/exec-env ] && [ -O /tmp/imagekit/exec-env ]; then
    . /tmp/imagekit/exec-env
fi
# `docker exec` runs as the image's start user, root (the door an admin uses); the services may
# run as someone else (the workspace's owner). An interactive root shell says so, once, with
# the command that works as them, so files written into /workspace keep their owner.
if [ -n "${PS1:-}" ] && [ "$(id -u)" = 0 ] && [ -r /tmp/imagekit/user ] && [ -z "${IMAGEKIT_EXEC_NOTED:-}" ]; then
    export IMAGEKIT_EXEC_NOTED=1
    _imagekit_user=$(cat /tmp/imagekit/user)
    if [ -n "$_imagekit_user" ] && [ "$_imagekit_user" != root ]; then
        echo "imagekit: this shell is root; the services run as $_imagekit_user (docker exec -it -u $_imagekit_user CONTAINER bash works as them, and what it writes to /workspace stays theirs)" >&2
    fi
    unset _imagekit_user
fi
