"""flashbench.history.cache: a cached load is the uncached frame, bit for bit, and the
cache parses only what is new, survives corruption, schema changes and two builders."""

import itertools
import json
import multiprocessing
import os
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench.history import ResultsWarning, load_results
from flashbench.history import cache as hcache
from flashbench.history import rows as hrows
from flashbench.history.frame import SAMPLES
from flashbench.history.load import refresh_cache
from flashbench.history.parts import runs
from tools import asv_corpus as CORPUS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"  # the project's committed asv history (never written here)




def assert_same_frame(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Same columns, dtypes, attrs, categories (values and their types) and codes; floats
    and dates bit for bit; objects of the same type and repr; samples: the same lists
    (NA alike), their values the same bits."""
    assert list(a.columns) == list(b.columns)
    assert a.attrs == b.attrs and len(a) == len(b)
    assert a.index.equals(b.index)
    for c in a.columns:
        x, y = a[c], b[c]
        assert x.dtype == y.dtype, c
        if isinstance(x.dtype, pd.CategoricalDtype):
            assert [(type(v), repr(v)) for v in x.cat.categories] == \
                [(type(v), repr(v)) for v in y.cat.categories], c
            assert x.cat.categories.dtype == y.cat.categories.dtype, c
            assert np.array_equal(x.cat.codes.to_numpy(), y.cat.codes.to_numpy()), c
        elif isinstance(x.dtype, pd.DatetimeTZDtype):
            assert np.array_equal(x.array.asi8, y.array.asi8), c
        elif c == "samples":
            assert x.dtype == SAMPLES
            xa, ya = (pa.chunked_array(s.array._pa_array).combine_chunks() for s in (x, y))
            assert xa.is_null().equals(ya.is_null())
            assert xa.value_lengths().equals(ya.value_lengths())
            assert np.array_equal(xa.flatten().to_numpy().view(np.int64),
                                  ya.flatten().to_numpy().view(np.int64))
        elif x.dtype == object:
            assert [(type(v), repr(v)) for v in x] == [(type(v), repr(v)) for v in y], c
        else:
            assert np.array_equal(x.to_numpy().view(np.int64), y.to_numpy().view(np.int64)), c


def quiet_load(*args, **kwargs) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultsWarning)
        return load_results(*args, **kwargs)


def odd_corpus(root: Path, files: int = 12, machines: int = 2) -> Path:
    """A generated corpus plus the files a loader must report: not JSON, no 'result'
    column, a malformed entry and values that are not numbers."""
    CORPUS.make_corpus(root, files, 16, machines=machines)
    machine = root / "synthetic-machine-0"
    (machine / "zz-truncated.json").write_text('{"version": 2, "results": {')
    good = json.loads(next(machine.glob("0000000*-env.json")).read_text())
    odd = dict(good, results=dict(good["results"]), commit_hash="f" * 40)
    name, row = next(iter(odd["results"].items()))
    odd["results"][name] = "not a list"
    other = list(odd["results"])[1]
    row = list(odd["results"][other])
    row[0] = ["fast", *row[0][1:]]
    odd["results"][other] = row
    (machine / "zz-odd.json").write_text(json.dumps(odd))
    (machine / "zz-nores.json").write_text(json.dumps(dict(good, result_columns=["params"])))
    return root


OLD = 1_600_000_000_000_000_000  # ns: results files long written, none racily clean


def age(root: Path) -> None:
    for path in root.glob("*/*.json"):
        os.utime(path, ns=(OLD, OLD))


def warm_corpus(tmp_path: Path, files: int) -> tuple[Path, Path]:
    """A generated corpus of ``files`` files a machine, long written, and its cache built:
    (the results folder, the cache folder)."""
    root = tmp_path / "corpus"
    CORPUS.make_corpus(root, files, 4)
    age(root)
    where = tmp_path / "cache"
    quiet_load(root, cache=where)
    return root, where


def spy_parse(monkeypatch) -> list:
    """The results files each cache update parses (one list per parse)."""
    calls = []
    real = hrows.parse

    def parse(roots, metas, files, jobs=None):
        calls.append(sorted(p.name for _, p in files))
        return real(roots, metas, files, jobs)

    monkeypatch.setattr(hcache, "parse", parse)
    return calls


def test_cached_and_uncached_frames_are_the_same_on_the_committed_results(tmp_path):
    assert any(RESULTS.glob("*/*.json")), "results/ holds the project's asv history"
    plain = quiet_load(RESULTS, cache=False)
    cold = quiet_load(RESULTS, cache=tmp_path)
    warm = quiet_load(RESULTS, cache=tmp_path)
    assert len(plain) > 1000 and plain["samples"].notna().any()
    assert_same_frame(plain, cold)
    assert_same_frame(plain, warm)
    assert_same_frame(plain.drop(columns="samples"),
                      quiet_load(RESULTS, cache=tmp_path, samples=False))


def test_cached_and_uncached_frames_are_the_same_on_a_generated_corpus(tmp_path):
    root = odd_corpus(tmp_path / "corpus")
    with pytest.warns(ResultsWarning) as plain_warnings:
        plain = load_results(root, cache=False)
    assert len(plain.attrs["skipped_files"]) == 3
    for jobs in (1, 2):  # a cold cache parses with workers, as an uncached load does
        where = tmp_path / f"cache-{jobs}"
        with pytest.warns(ResultsWarning) as cold_warnings:
            cold = load_results(root, jobs=jobs, cache=where)
        with pytest.warns(ResultsWarning) as warm_warnings:
            warm = load_results(root, cache=where)
        for got in (cold_warnings, warm_warnings):  # the same reports, from the cache too
            assert [str(w.message) for w in got] == [str(w.message) for w in plain_warnings]
        assert_same_frame(plain, cold)
        assert_same_frame(plain, warm)
    other = tmp_path / "other"  # several folders: file names, folder order, shared grids
    CORPUS.make_corpus(other, 5, 8, seed=3)
    both = quiet_load([root, other], cache=False)
    assert_same_frame(both, quiet_load([root, other], cache=tmp_path / "cache-1"))
    assert_same_frame(both, quiet_load([root, other], cache=tmp_path / "cache-1"))


def test_only_new_or_changed_files_are_parsed(tmp_path, monkeypatch):
    root = tmp_path / "corpus"
    grids = CORPUS.make_corpus(root, 10, 8, machines=2)
    age(root)
    calls = spy_parse(monkeypatch)
    where = tmp_path / "cache"
    first = quiet_load(root, cache=where)
    assert len(calls) == 1 and len(calls[0]) == 20
    assert_same_frame(first, quiet_load(root, cache=where))
    assert len(calls) == 1  # warm: nothing parsed
    import random

    machine = root / "synthetic-machine-1"
    new = CORPUS.write_file(machine, 10, grids, random.Random(5),
                            {"machine": "synthetic-machine-1", "cpu": "Synthetic CPU 1"})
    assert_same_frame(quiet_load(root, cache=False), quiet_load(root, cache=where))
    assert calls[-1] == [new.name]
    changed = next(machine.glob("00000003-env.json"))
    data = json.loads(changed.read_text())
    data["env_name"] = "env-2"
    changed.write_text(json.dumps(data))
    os.utime(changed, ns=(OLD + 10**9, OLD + 10**9))
    new.unlink()
    assert_same_frame(quiet_load(root, cache=False), quiet_load(root, cache=where))
    assert calls[-1] == [changed.name]
    assert len(calls) == 3
    again = CORPUS.write_file(machine, 11, grids, random.Random(6),
                              {"machine": "synthetic-machine-1", "cpu": "Synthetic CPU 1"})
    os.utime(again, ns=(OLD, OLD))
    assert refresh_cache(root, cache=where) == 1 and calls[-1] == [again.name]
    assert refresh_cache(root, cache=where) == 0
    assert_same_frame(quiet_load(root, cache=False), quiet_load(root, cache=where))
    assert len(calls) == 4  # the refreshed cache served the load
    with pytest.raises(ValueError, match="cache is off"):
        refresh_cache(root, cache=False)


def test_a_rewrite_with_the_same_size_and_mtime_is_read_again(tmp_path, monkeypatch):
    """Racily clean: a file changed in the clock tick of the load that cached it."""
    root = tmp_path / "corpus"
    CORPUS.make_corpus(root, 3, 4)
    age(root)
    path = next(root.glob("*/00000001-env.json"))
    path.touch()  # written just now
    stat = path.stat()
    calls = spy_parse(monkeypatch)
    where = tmp_path / "cache"
    quiet_load(root, cache=where)
    text = path.read_text()
    swapped = text.replace('"env_name": "env"', '"env_name": "vne"')
    assert swapped != text and len(swapped) == len(text)
    path.write_text(swapped)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    frame = quiet_load(root, cache=where)
    assert "vne" in set(frame["env"]) and calls[-1] == [path.name]
    assert_same_frame(quiet_load(root, cache=False), frame)


@pytest.mark.parametrize("damage", ["index", "part", "truncated", "disagree"])
def test_a_corrupt_cache_is_reported_and_rebuilt(tmp_path, damage):
    root = tmp_path / "corpus"
    CORPUS.make_corpus(root, 4, 4)
    age(root)
    where = tmp_path / "cache"
    plain = quiet_load(root, cache=False)
    quiet_load(root, cache=where)
    folder = next(where.iterdir())
    part = json.loads((folder / "index.json").read_text())["parts"][0]
    if damage == "index":
        (folder / "index.json").write_text("{not json")
    elif damage == "part":
        (folder / f"{part}.rows.parquet").unlink()
    elif damage == "truncated":
        path = folder / f"{part}.samples.parquet"
        path.write_bytes(path.read_bytes()[:100])
    else:  # readable tables that disagree with each other
        import pyarrow.parquet as pq

        rows = pq.read_table(folder / f"{part}.rows.parquet")
        pq.write_table(rows.slice(0, 5), folder / f"{part}.rows.parquet")
    with pytest.warns(ResultsWarning, match=r"history cache .* is corrupt .*; (rebuilding it"
                                            r"|parsing the results files of part-\w+ again)"):
        frame = load_results(root, cache=where)
    assert_same_frame(plain, frame)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultsWarning)  # rebuilt: no second report
        assert_same_frame(plain, load_results(root, cache=where))


def test_an_edit_that_puts_back_size_and_mtime_is_read_again(tmp_path, monkeypatch):
    """Issue 36 (7): size and mtime can be put back by hand (os.utime, touch -d); the
    kernel's ctime cannot. Failed before: the cache served the old env name."""
    root, where = warm_corpus(tmp_path, 3)
    calls = spy_parse(monkeypatch)
    path = next(root.glob("*/00000001-env.json"))
    stat = path.stat()
    time.sleep(0.05)  # past the clock tick of the ctime the cache recorded
    text = path.read_text()
    swapped = text.replace('"env_name": "env"', '"env_name": "vne"')
    assert swapped != text and len(swapped) == len(text)
    path.write_text(swapped)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (stat.st_size, stat.st_mtime_ns)
    frame = quiet_load(root, cache=where)
    assert "vne" in set(frame["env"]) and calls == [[path.name]]
    assert_same_frame(quiet_load(root, cache=False), frame)


@pytest.mark.parametrize("table", ["files", "entries", "rows", "samples"])
def test_flipped_bytes_in_a_part_are_reported_and_its_files_parsed_again(tmp_path, table):
    """Issue 36 (8): eight bytes flipped inside the largest column of a part's table, the
    file's size unchanged. Failed before (no page checksums): wrong numbers, no report."""
    import pyarrow.parquet as pq

    root = tmp_path / "corpus"
    CORPUS.make_corpus(root, 6, 6)
    age(root)
    where = tmp_path / "cache"
    plain = quiet_load(root, cache=False)
    quiet_load(root, cache=where)
    folder = next(where.iterdir())
    part = json.loads((folder / "index.json").read_text())["parts"][0]
    path = folder / f"{part}.{table}.parquet"
    group = pq.ParquetFile(path).metadata.row_group(0)
    col = max((group.column(i) for i in range(group.num_columns)),
              key=lambda c: c.total_compressed_size)
    data = bytearray(path.read_bytes())
    at = col.data_page_offset + col.total_compressed_size // 2
    data[at:at + 8] = bytes(b ^ 0xFF for b in data[at:at + 8])
    path.write_bytes(bytes(data))
    with pytest.warns(ResultsWarning, match=rf"corrupt \(part {part}: its {table} table: .*\); "
                                            rf"parsing the results files of {part} again"):
        frame = load_results(root, cache=where)
    assert_same_frame(plain, frame)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResultsWarning)  # parsed again: no second report
        assert_same_frame(plain, load_results(root, cache=where))
    assert part not in (folder / "index.json").read_text()


def test_a_schema_change_rebuilds_the_cache(tmp_path, monkeypatch):
    root = tmp_path / "corpus"
    CORPUS.make_corpus(root, 4, 4)
    where = tmp_path / "cache"
    calls = spy_parse(monkeypatch)
    quiet_load(root, cache=where)
    monkeypatch.setattr(hcache, "SCHEMA", hcache.SCHEMA + 1)
    assert_same_frame(quiet_load(root, cache=False), quiet_load(root, cache=where))
    assert len(calls) == 2 and len(calls[1]) == 4  # everything parsed again
    folder = next(where.iterdir())
    assert json.loads((folder / "index.json").read_text())["schema"] == hcache.SCHEMA
    assert len(list(folder.glob("*.rows.parquet"))) == 1  # the old part is gone


def test_many_small_updates_are_merged_into_few_parts(tmp_path):
    root = tmp_path / "corpus"
    grids = CORPUS.make_corpus(root, 2, 4)
    where = tmp_path / "cache"
    import random

    for f in range(2, 2 + hcache.MAX_PARTS + 3):
        CORPUS.write_file(root / "synthetic-machine", f, grids, random.Random(f),
                          {"machine": "synthetic-machine", "cpu": "Synthetic CPU"})
        quiet_load(root, cache=where)
    folder = next(where.iterdir())
    parts = json.loads((folder / "index.json").read_text())["parts"]
    assert len(parts) <= hcache.MAX_PARTS
    assert sorted(p.name.split(".")[0] for p in folder.glob("*.rows.parquet")) == sorted(parts)
    assert_same_frame(quiet_load(root, cache=False), quiet_load(root, cache=where))


def test_where_the_cache_lives_and_how_to_turn_it_off(tmp_path, monkeypatch):
    root = tmp_path / "results"
    CORPUS.make_corpus(root, 2, 4)
    monkeypatch.delenv(hcache.ENV, raising=False)
    assert hcache.cache_dir(root) == tmp_path / ".flashbench-cache" / "results"
    quiet_load(root)
    assert (tmp_path / ".flashbench-cache" / "results" / "index.json").exists()
    shutil.rmtree(tmp_path / ".flashbench-cache")  # safe to delete
    monkeypatch.setenv(hcache.ENV, "off")
    quiet_load(root)
    assert hcache.cache_dir(root) is None and not (tmp_path / ".flashbench-cache").exists()
    monkeypatch.setenv(hcache.ENV, str(tmp_path / "elsewhere"))
    quiet_load(root)
    assert [p.name.startswith("results-") for p in (tmp_path / "elsewhere").iterdir()] == [True]
    with pytest.raises(TypeError, match="cache must be"):
        load_results(root, cache=3)


def test_a_cache_that_cannot_be_written_is_skipped_with_a_warning(tmp_path):
    root = tmp_path / "corpus"
    CORPUS.make_corpus(root, 2, 4)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.warns(ResultsWarning, match="history cache .* not used"):
        frame = load_results(root, cache=blocker)
    assert_same_frame(quiet_load(root, cache=False), frame)


def test_a_cached_folder_and_a_parsed_one_make_the_same_frame(tmp_path):
    """One folder read from its cache (Arrow samples, entries from Parquet), the other
    parsed (its cache cannot be written): merged, the frame is the uncached one."""
    a, b = tmp_path / "a", tmp_path / "b"
    CORPUS.make_corpus(a, 3, 6)
    CORPUS.make_corpus(b, 2, 5, machines=2, seed=1)
    where = tmp_path / "cache"
    quiet_load(a, cache=where)  # a's cache, warm
    hcache.cache_dir(b, where).parent.mkdir(exist_ok=True)
    hcache.cache_dir(b, where).write_text("not a folder")  # b's cannot be made
    plain = quiet_load([a, b], cache=False)
    with pytest.warns(ResultsWarning, match="not used"):
        mixed = load_results([a, b], cache=where)
    assert_same_frame(plain, mixed)
    assert mixed["samples"].notna().any()


def _load_in_child(root, where, queue):
    frame = quiet_load(root, cache=where)
    queue.put(float(frame["value"].sum()))


def test_two_processes_building_one_cache_at_once(tmp_path, monkeypatch):
    root = tmp_path / "corpus"
    CORPUS.make_corpus(root, 30, 8, machines=2)
    age(root)
    where = tmp_path / "cache"
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    children = [ctx.Process(target=_load_in_child, args=(root, where, queue)) for _ in range(2)]
    for child in children:
        child.start()
    sums = [queue.get(timeout=120) for _ in children]
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    plain = quiet_load(root, cache=False)
    assert sums[0] == sums[1] == float(plain["value"].sum())
    folder = next(where.iterdir())
    assert len(json.loads((folder / "index.json").read_text())["parts"]) == 1
    calls = spy_parse(monkeypatch)  # the one built by the first is complete
    assert_same_frame(plain, quiet_load(root, cache=where))
    assert calls == []


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 6)), max_size=12))
def test_runs_cover_the_stretches_in_order_with_no_two_adjacent(pairs):
    starts = np.array([s for s, _ in pairs], dtype=np.int64)
    lengths = np.array([n for _, n in pairs], dtype=np.int64)
    got = runs(starts, lengths)
    want = [i for s, n in pairs for i in range(s, s + n)]
    assert [i for s, n in got for i in range(s, s + n)] == want
    assert all(n > 0 for _, n in got)
    assert all(a + n != b for (a, n), (b, _) in itertools.pairwise(got))


def test_a_fresh_checkouts_files_are_not_parsed_again_and_its_clones_share_a_cache(
        tmp_path, monkeypatch):
    """A probe (2026-12-07): a fresh checkout gives every results file new times, and the
    cache parsed all 56 files again at every publish (its key: size, mtime, ctime); under a
    chosen cache folder, each Slurm job's clone path named a new cache (a full copy a run).
    Unchanged contents are now known by their digest, and clones of one repository share
    the chosen folder's cache."""
    import subprocess

    root, where = warm_corpus(tmp_path, 4)
    calls = spy_parse(monkeypatch)
    for path in root.glob("*/*.json"):  # as a new checkout writes them: new mtime, ctime
        path.write_bytes(path.read_bytes())
    assert_same_frame(quiet_load(root, cache=False), quiet_load(root, cache=where))
    assert calls == []
    edited = next(root.glob("*/00000001-env.json"))
    edited.write_text(edited.read_text().replace('"env_name": "env"', '"env_name": "vne"'))
    assert "vne" in set(quiet_load(root, cache=where)["env"]) and calls == [[edited.name]]

    def git(*args, cwd):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                       check=True, capture_output=True, env={**os.environ,
                                                             "GIT_CONFIG_GLOBAL": os.devnull})

    origin = tmp_path / "origin"
    shutil.copytree(root, origin / "results")
    git("init", "-q", "-b", "main", cwd=origin)
    git("add", "-A", cwd=origin)
    git("commit", "-qm", "results", cwd=origin)
    for job in ("job-1", "job-2"):
        git("clone", "-q", str(origin), str(tmp_path / job), cwd=tmp_path)
    chosen = tmp_path / "shared"
    one, two = (hcache.cache_dir(tmp_path / job / "results", chosen) for job in ("job-1",
                                                                                  "job-2"))
    assert one == two and one.parent == chosen
    assert hcache.cache_dir(root, chosen) != one  # no checkout: its own path names it
