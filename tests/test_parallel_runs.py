"""How the tests share the parallel workers: a value computed once a run (tests/once_per_run.py),
slow tests first on every worker (conftest.slow_first_on_each_worker)."""

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


def test_each_worker_opens_with_its_share_of_the_slow_tests():
    from types import SimpleNamespace as Item

    from conftest import slow_first_on_each_worker

    def item(name, slow):
        return Item(name=name, get_closest_marker=lambda m, s=slow: object() if s else None)

    items = [item(f"f{i}", False) for i in range(8)] + [item(f"s{i}", True) for i in range(3)]
    got = [i.name for i in slow_first_on_each_worker(items, 3)]
    assert sorted(got) == sorted(i.name for i in items)  # nothing lost or repeated
    # xdist's first shares: 3, 4, 4 items; each opens with one slow test
    assert got[0] == "s0" and got[3] == "s1" and got[7] == "s2"
    assert [i.name for i in slow_first_on_each_worker(items, 1)][:3] == ["s0", "s1", "s2"]
