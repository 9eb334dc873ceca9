"""``python -m serving --model-repository DIR ...``: the folder server without Django at all."""

from __future__ import annotations

import argparse
import sys

from serving.cli import add_arguments, configure_logging, settings_from_args
from serving.main import main


def run() -> int:
    parser = argparse.ArgumentParser(prog="python -m serving", description=__doc__)
    add_arguments(parser)
    options = vars(parser.parse_args())
    configure_logging(options.get("log_verbose") or 0)
    try:
        settings = settings_from_args(options)
    except ValueError as exc:
        parser.error(str(exc))
    if settings.registry_mode:
        parser.error("--model-repository is required (registry mode runs under manage.py serve)")
    return main(settings)


if __name__ == "__main__":
    sys.exit(run())
