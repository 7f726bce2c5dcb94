#!/bin/bash
# HEALTHCHECK of imagekit full images: healthy when every service the entrypoint started answers.
services=$(cat /tmp/imagekit/services 2>/dev/null) || { echo "no services started"; exit 0; }
for service in $services; do
    case "$service" in
        jupyter)
            curl -fsS -o /dev/null --max-time 4 "http://127.0.0.1:${JUPYTER_PORT:-8888}/api" \
                || { echo "jupyter: no answer on ${JUPYTER_PORT:-8888}"; exit 1; } ;;
        ssh)
            # Listening, read from the kernel's table: a connection would make sshd log a
            # "Connection closed" line every interval.
            port=$(printf '%04X' "${SSH_PORT:-2222}")
            grep -qE "^ *[0-9]+: [0-9A-F]+:$port [0-9A-F]+:0000 0A" /proc/net/tcp /proc/net/tcp6 \
                || { echo "sshd: not listening on ${SSH_PORT:-2222}"; exit 1; } ;;
        tensorboard)
            host=${TENSORBOARD_HOST:-127.0.0.1}
            case "$host" in 0.0.0.0|::) host=127.0.0.1 ;; *:*) host="[$host]" ;; esac
            curl -fsS -o /dev/null --max-time 4 "http://$host:${TENSORBOARD_PORT:-6006}/" \
                || { echo "tensorboard: no answer on ${TENSORBOARD_PORT:-6006}"; exit 1; } ;;
    esac
done
echo "healthy:" $services
