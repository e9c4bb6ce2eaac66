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
    from types import SimpleNamespace

    from conftest import slow_first_on_each_worker

    def item(name, slow, module_fixture=False):
        defs = {"f": [SimpleNamespace(scope="module" if module_fixture else "function")]}
        return SimpleNamespace(
            nodeid=f"tests/{name[0]}.py::{name}", _fixtureinfo=SimpleNamespace(
                name2fixturedefs=defs),
            get_closest_marker=lambda m, s=slow: object() if s else None)

    items = ([item(f"f{i}", False) for i in range(8)] + [item(f"s{i}", True) for i in range(3)]
             + [item(f"m{i}", True, module_fixture=True) for i in range(2)])
    got = [i.name for i in slow_first_on_each_worker(
        [SimpleNamespace(**vars(i), name=i.nodeid.split("::")[1]) for i in items], 3)]
    assert sorted(got) == sorted(i.nodeid.split("::")[1] for i in items)  # none lost
    # xdist's first shares: 4, 4 and 5 items; the two tests sharing a module fixture stay
    # together and open the first share, each other share opens with slow tests
    assert got[:3] == ["m0", "m1", "f0"] and got[4:6] == ["s0", "s2"] and got[8] == "s1"
