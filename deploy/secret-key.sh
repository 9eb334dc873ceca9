#!/bin/sh
# The console's SECRET_KEY for the compose stack: generated on the first start into the secrets
# volume, kept (and checked) on every later start, readable only by the portico user. Run as root
# by the secret-key service; the console and the worker read it through SECRET_KEY_FILE.
set -eu
key_file="$1"
python -c 'import sys, pathlib
from console.security.secret_key import secret_key_from_file
secret_key_from_file(pathlib.Path(sys.argv[1]))' "$key_file"
chown portico "$key_file"
chmod 0400 "$key_file"
