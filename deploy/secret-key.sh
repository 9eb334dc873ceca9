#!/bin/sh
# The console's SECRET_KEY for the compose stack: generated on the first start into the secrets
# volume (readable only by the portico user), kept on every later start. Run as root by the
# secret-key service; the console and the worker read it through SECRET_KEY_FILE.
set -eu
key_file="$1"
if [ ! -s "$key_file" ]; then
    umask 077
    python -c 'import secrets; print(secrets.token_urlsafe(64))' > "$key_file.new"
    mv "$key_file.new" "$key_file"
fi
chown portico "$key_file"
chmod 0400 "$key_file"
