"""The garbage collector's settings for the long-running serving process.

Why: after start-up such a process holds about 130,000 objects that live as long as it does
(Django's and the libraries' modules, the models' configs). Each full collection walked all of
them: under HTTP load on the MLP, 14 full collections in about 15 s took 0.8 s of the loop, about
58 ms each, during which no request moved. Freezing them moves them out of the collector's
sight. What a request allocates mostly dies young, yet 32 requests in flight passed CPython's
700-object mark for the youngest generation every few requests (3,764 young collections in that
run); at 10,000 it is collected about a fourteenth as often, which measured a little less CPU
per request than freezing alone. Measured in docs/benchmarks.md ("the garbage collector").

Only the serving process calls this (``manage.py serve``): it changes the interpreter's state
for everything in it, which an embedding application or a test run chooses for itself. The
front-end processes do not: what it saves there has not been measured.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # CPython's default: 700
MIDDLE_THRESHOLD = 20  # young collections per middle one (default 10)


def freeze_startup_objects() -> None:
    """Collect start-up's garbage, then keep what is left out of every later collection."""
    gc.collect()
    gc.freeze()
    oldest = gc.get_threshold()[2]
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, oldest)
