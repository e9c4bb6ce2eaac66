"""tests/once_per_run.py: one computation a run, whichever xdist workers ask."""

import threading
from types import SimpleNamespace

from once_per_run import once_per_run


def test_the_value_is_computed_once_and_read_by_every_other_worker(tmp_path):
    names = ("gw0", "gw1", "gw2")
    workers = {w: SimpleNamespace(getbasetemp=lambda w=w: tmp_path / f"popen-{w}")
               for w in names}
    calls, got = [], []

    def make():
        calls.append(1)
        return {"rc": 0, "rows": [1, 2]}

    threads = [threading.Thread(target=lambda w=w: got.append(
        once_per_run(workers[w], w, "thing", make))) for w in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and got == [{"rc": 0, "rows": [1, 2]}] * 3
    # without xdist ("master") nothing is shared: the run's temp folder is not a run's own
    assert once_per_run(workers["gw0"], "master", "thing", make) == got[0] and len(calls) == 2
