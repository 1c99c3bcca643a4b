"""`python -m tests.faults.first_open instance|tracker ROOT [MOMENT]`: open the data root's Dagster instance
(`pipelines.instance.get_instance`) or its MLflow store (`resources.tracker.TrackerResource`, one query), the
first start of either on an empty root, at the wall-clock MOMENT (seconds since the epoch) if one is given.

The fault tests fork it from their preloaded server (`tests/faults/preloaded.py`) to race first starts: each
imports what it opens first, then waits for the moment, so the race, not the imports, decides.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> None:
    what, root, *moment = argv
    if what == "instance":
        from pipelines.instance import get_instance

        def open_it() -> None:
            get_instance(root)
    elif what == "tracker":
        from resources.tracker import TrackerResource

        def open_it() -> None:
            TrackerResource(data_root=root).client().search_experiments(max_results=1)
    else:
        sys.exit(f"first_open: {what!r} is neither instance nor tracker")
    if moment:
        time.sleep(max(0.0, float(moment[0]) - time.time()))
    open_it()


if __name__ == "__main__":
    main(sys.argv[1:])
