"""The embedded default for a laptop and the demo."""

from console.settings.base import *  # noqa: F403

DEBUG = env.bool("DEBUG", default=True)  # noqa: F405
