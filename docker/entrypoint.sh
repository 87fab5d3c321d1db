#!/bin/sh
# The image's entrypoint: checks that the folder of the database (and of the signing key and media
# beside it) is writable before anything runs, because a bind-mounted host folder keeps its host
# owner and the server runs as the image's `node` user (uid 1000): SQLite's own error would only
# say "unable to open database file".
db=${BOT_HOMESERVER_DATABASE__PATH:-/data/homeserver.db}
dir=$(dirname "$db")
if [ "$db" != ":memory:" ] && [ -d "$dir" ] && ! { [ -w "$dir" ] && [ -x "$dir" ]; }; then
  cat >&2 <<MSG
bot-homeserver: $dir is not writable by this container's user (uid $(id -u), gid $(id -g)), so the
database cannot be created there. A bind-mounted folder keeps its owner on the host. Either give it
to that user on the host:
    sudo chown -R $(id -u):$(id -g) /path/on/host
or run the container as the folder's owner:
    docker run --user "\$(stat -c %u:%g /path/on/host)" ...
or use a named volume (-v bhs-data:/data), which Docker creates owned by the image's user.
MSG
  exit 1
fi
exec "$@"
