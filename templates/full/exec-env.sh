# Sourced by every bash of a full image (BASH_ENV, /etc/bash.bashrc): a `docker exec` into a
# container started with `--user UID:GID` for a uid /etc/passwd does not know gets the name and
# home the entrypoint gave that uid. Only the file of the uid that runs is read, never one that
# another user could have written.
if [ -z "${NSS_WRAPPER_PASSWD:-}" ] && [ -f /tmp/imagekit/exec-env ] && [ -O /tmp/imagekit/exec-env ]; then
    . /tmp/imagekit/exec-env
fi
