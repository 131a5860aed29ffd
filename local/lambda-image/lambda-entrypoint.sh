#!/bin/sh
# The image's entry point, as in AWS's base images: `docker run IMAGE app.handler`. sam local replaces it with the
# emulator, which runs /var/runtime/bootstrap itself.
if [ $# -ne 1 ]; then
  echo "entrypoint requires the handler name to be the first argument" >&2
  exit 142
fi
export _HANDLER="$1"
exec /var/runtime/bootstrap "$1"
