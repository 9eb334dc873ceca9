"""The collector's settings for whole serving processes (``serving.heap``), in a fresh
interpreter: they change the interpreter for everything in it, so never in the test process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import gc, json, weakref
import serving.main  # what a serving process has imported before it serves
from serving import heap

before = len(gc.get_objects())
heap.freeze_startup_objects()
walked = len(gc.get_objects())

class Node:
    pass

a, b = Node(), Node()
a.other, b.other = b, a  # a cycle made after the freeze: garbage only the collector frees
gone = weakref.ref(a)
del a, b
gc.collect()
print(json.dumps({"before": before, "walked": walked, "frozen": gc.get_freeze_count(),
                  "cycle_freed": gone() is None, "threshold": gc.get_threshold()}))
"""


def test_startup_objects_leave_the_collectors_sight_and_new_garbage_is_still_freed() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["before"] > 10_000  # the imports alone
    assert found["frozen"] >= found["before"] * 0.9
    assert found["walked"] < found["before"] // 10  # what each full collection still walks
    assert found["cycle_freed"]
    assert found["threshold"][:2] == [10_000, 20]
