"""A value computed once per pytest run, shared by the pytest-xdist workers."""

import json


def once_per_run(tmp_path_factory, worker_id: str, name: str, make):
    """``make()``'s JSON-able value, computed once per pytest run. A module-scoped fixture
    runs once per pytest-xdist worker that runs one of its tests, and work stealing spreads
    a module's tests over workers (the ``unchanged`` review of tests/test_review.py ran
    twice in one run: 15 s of CPU): the first worker computes the value, holding a file
    lock beside the workers' temp folders (the run's own), and writes it there; the
    others wait and read it. Without xdist, computed here."""
    if worker_id == "master":
        return make()
    from filelock import FileLock

    path = tmp_path_factory.getbasetemp().parent / f"{name}.json"
    with FileLock(f"{path}.lock"):
        if path.is_file():
            return json.loads(path.read_text())
        value = make()
        path.write_text(json.dumps(value))
        return value
