#!/usr/bin/env python
"""Django's command-line utility for Portico (console, worker helpers, serve, import/export).

Production settings unless asked otherwise (``PORTICO_ENV``, ``DJANGO_SETTINGS_MODULE``: see
``console/environment.py``); ``runplatform`` (what ``make run`` calls) picks its loopback-only
platform settings itself, so a fresh clone runs with no variables set.
"""

import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["runplatform"]:
        os.environ.setdefault("PORTICO_ENV", "platform")
    from console.environment import settings_module_select

    settings_module_select()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
