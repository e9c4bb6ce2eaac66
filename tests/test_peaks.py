"""The roofline's remembered peaks (flashbench.measure.peaks): a CPU peak measured while the
machine is busy never raises the floor above what the machine has shown it can do."""

import json
import os
import re

import torch

from flashbench.measure.peaks import PEAKS_FILE, best_peaks, remembered


def test_a_low_peak_is_raised_to_the_best_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    assert best_peaks({"fp32": 0.2}, 40.0) == ({"fp32": 0.2}, 40.0, False, [])
    # measured while two busy loops shared the CPUs: 4.6x low
    assert best_peaks({"fp32": 0.043}, 9.0) == ({"fp32": 0.2}, 40.0, True, [])
    assert best_peaks({"fp32": 0.3, "bf16": 0.9}, 50.0) == ({"fp32": 0.3, "bf16": 0.9}, 50.0,
                                                            False, [])
    # a remembered peak stands for at most 5x this run's (copy: 50 GB/s remembered, 1 now)
    assert best_peaks({"fp32": 0.1}, 1.0) == ({"fp32": 0.3}, 5.0, True, ["copy GB/s"])
    # ... in that run only: the file keeps its best (one busy run cut a remembered bf16
    # peak 50x, and every later run's floor with it: a correct bf16 kernel FAILed 3 in 7)
    assert remembered() == {"fp32": 0.3, "bf16": 0.9, "copy GB/s": 50.0}
    assert best_peaks({"fp32": 0.3}, 40.0) == ({"fp32": 0.3}, 50.0, True, [])
    # another torch thread count is another machine for its peak
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        assert best_peaks({"fp32": 0.05}, 5.0) == ({"fp32": 0.05}, 5.0, False, [])
    finally:
        torch.set_num_threads(threads)


def test_an_unreadable_peaks_file_is_replaced_and_said(tmp_path, monkeypatch, capsys):
    """Replaced, never fatal; and said (a probe: replaced without a word), once, on stderr
    and in the roofline's "how" that speed prints."""
    from flashbench.measure.peaks import unreadable
    from flashbench.measure.roofline import measure_roofline

    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    (tmp_path / PEAKS_FILE).write_text("{not json")
    assert best_peaks({"fp32": 0.2}, 40.0) == ({"fp32": 0.2}, 40.0, False, [])
    assert list(json.loads((tmp_path / PEAKS_FILE).read_text()).values()) == [40.0, 0.2]
    assert "Expecting property name" in unreadable()
    err = capsys.readouterr().err
    assert f"the remembered peaks {tmp_path / PEAKS_FILE} were unreadable" in err
    assert err.count("\n") == 1 and unreadable() and not capsys.readouterr().err  # once
    how = measure_roofline("cpu", ["fp32"]).how
    assert f"{PEAKS_FILE} unreadable (Expecting property name" in how
    # where "the best this machine has measured" is kept, named (a newcomer could not tell)
    assert f"the best this machine has measured (kept in {tmp_path / PEAKS_FILE}" in how


def test_implausible_peaks_are_dropped_and_said(tmp_path, monkeypatch):
    from flashbench.measure.peaks import unreadable

    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path / "a"))
    assert unreadable() is None  # no file: nothing to say
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / PEAKS_FILE).write_text(json.dumps({"x": 1.0, "y": -2, "z": "9"}))
    assert remembered() == {} and unreadable() == ("2 of its 3 entries not a positive finite "
                                                   "number, dropped")
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path / "b"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / PEAKS_FILE).write_text("[1, 2]")
    assert remembered() == {} and unreadable() == "not a JSON object"


def test_a_precision_slower_than_fp32_is_floored_by_the_fastest_matmul(tmp_path, monkeypatch):
    """A CPU's fp16 matmul ran at 0.001 TFLOP/s, so torch's own SDPA in fp16 (fp32 inside)
    failed "below the roofline floor" (404 % of the fp16 peak): a kernel may compute in
    fp32 whatever its inputs, so % peak is of the faster of its own matmul and fp32's, and
    the floor of the fastest measured (bf16 here ran 4x fp32: fp32 rows' % peak must not
    move with the dtypes asked beside them)."""
    from flashbench.measure.roofline import measure_roofline

    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    roof = measure_roofline("cpu", ["fp16", "bf16", "fp32"])
    alone = measure_roofline("cpu", ["fp32"])
    best = max(roof.tflops.values())
    for d in ("fp16", "bf16", "fp32"):
        assert roof.peak(d) >= roof.peak("fp32") and roof.floor_peak(d) == best
        if roof.peak(d) != best:
            assert f"the floor of the {max(roof.tflops, key=roof.tflops.get)} matmul" in \
                roof.peak_used(d)
    # fp32's own peak whatever else was asked (measured again alone: at least as high,
    # the remembered best being kept), never bf16's
    assert roof.peak_used("fp32").startswith("fp32 matmul")
    assert roof.peak("fp32") <= alone.peak("fp32") and alone.peak_used("fp32") == "fp32 matmul"


def test_an_fp64_rows_peak_is_fp64s_own(tmp_path, monkeypatch):
    """An fp64 row's % peak was of the fp32 matmul, "faster here than fp64's own: a kernel
    may compute in fp32" (a red team, 2026-12-07): an fp64 kernel computing in fp32 fails
    its check (1e-12), so its % peak read about 2.5x low. Its floor stays the fastest
    measured matmul's (lenient: a floor is what no kernel beats)."""
    from flashbench.measure.roofline import measure_roofline

    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    roof = measure_roofline("cpu", ["fp64", "fp32"])
    assert roof.peak("fp64") == roof.tflops["fp64"] < roof.peak("fp32"), roof.tflops
    assert roof.peak_used("fp64").startswith("fp64 matmul;"), roof.peak_used("fp64")
    assert roof.floor_peak("fp64") == max(roof.tflops.values())


def _tampered(path, factor: float) -> None:
    known = json.loads(path.read_text())
    path.write_text(json.dumps({k: v * factor for k, v in known.items()}))


def test_a_peaks_file_raised_by_code_under_test_lowers_no_floor(tmp_path, monkeypatch):
    """A kernel's worker runs as the same user: raising the remembered peaks a millionfold
    took the roofline floor to about 0 (a memoising kernel then PASSed, in that run and in
    every later one). The file is read once a process, before any worker starts, and a
    remembered peak stands for at most 5x the run's own, said in the roofline's note."""
    import subprocess
    import sys

    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    assert best_peaks({"fp32": 0.2}, 40.0) == ({"fp32": 0.2}, 40.0, False, [])
    _tampered(tmp_path / PEAKS_FILE, 1e6)  # during this run: never read again here
    assert best_peaks({"fp32": 0.19}, 39.0) == ({"fp32": 0.2}, 40.0, True, [])
    _tampered(tmp_path / PEAKS_FILE, 1e6)
    later = subprocess.run(  # a later run reads the tampered file: capped at 5x its own
        [sys.executable, "-c", "from flashbench.measure.roofline import measure_roofline\n"
         "r = measure_roofline('cpu', ['fp32'])\nprint(r.peak('fp32'), r.copy_gbs)\n"
         "print(r.how)"], capture_output=True, text=True, check=True)
    peak, copy = map(float, later.stdout.splitlines()[0].split())
    assert peak < 100 and copy < 10_000  # 5x its own (here about 0.2 and 40), not 2e11
    assert "remembered fp32, copy GB/s over 5x this run's: capped there" in later.stdout
    # the run's own figures are given beside the remembered ones it uses (a probe: "this
    # run measured less" and no number; the footer's one-thread bound read as a 2nd peak)
    said = re.search(r"this run measured less: fp32 ([\d.e+-]+), copy ([\d.e+-]+) GB/s",
                     later.stdout)
    assert said and float(said[1]) < peak and float(said[2]) < copy, later.stdout


def test_a_peaks_file_that_breaks_the_parser_is_replaced(tmp_path, monkeypatch):
    """100,000 "[" made json raise RecursionError: every later speed run failed, exit 3."""
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    (tmp_path / PEAKS_FILE).write_text("[" * 100_000)
    assert best_peaks({"fp32": 0.2}, 40.0) == ({"fp32": 0.2}, 40.0, False, [])
    assert sorted(json.loads((tmp_path / PEAKS_FILE).read_text()).values()) == [0.2, 40.0]


POISON = '''
import json
import os
import re
from pathlib import Path

import torch

PATH = Path(os.environ["FLASHBENCH_CACHE"]) / "peaks.json"
PATH.write_text(json.dumps({k: v * 1e6 for k, v in json.loads(PATH.read_text()).items()}))
(PATH.parent / "poisoned").write_text(str(os.getpid()))


def attn(q, k, v, causal=False, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
'''


def test_speed_reads_the_peaks_before_a_kernel_can_raise_them(tmp_path, monkeypatch, capsys):
    """A kernel whose import raises peaks.json a millionfold (in its worker, the same user)
    moves no peak of the run that imported it."""
    from flashbench.cli import main

    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    (tmp_path / "poisons.py").write_text(POISON)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert best_peaks({"fp32": 0.2}, 40.0)[:2] == ({"fp32": 0.2}, 40.0)  # an earlier run's
    from flashbench.measure import peaks

    peaks._SEEN.clear()  # this process is a new run
    main(["speed", "--shape", "1x2x128x32", "--dtype", "fp32", "--json", "--quiet",
          "--seed", "3", "--only", "poisons:attn", "torch-sdpa"])
    report = json.loads(capsys.readouterr().out)
    assert int((tmp_path / "poisoned").read_text()) != os.getpid()  # in its worker, it did
    roof = report["meta"]["roofline"]
    assert roof["matmul_tflops"]["fp32"] < 100 and roof["copy_gbs"] < 10_000


def test_a_remembered_peak_is_capped_against_the_one_thread_bound(tmp_path, monkeypatch):
    """Under two busy loops a parallel bf16 matmul read 20x low: capped at 5x that, the
    remembered peak fell and a correct bf16 kernel FAILed the floor (3 runs of 7). One
    thread's matmul x the threads is an upper bound a busy CPU hardly lowers: the cap is
    of it where it is higher."""
    from flashbench.measure.roofline import _one_thread_bound

    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    assert best_peaks({"fp32": 0.2, "bf16": 0.9}, 40.0)[0] == {"fp32": 0.2, "bf16": 0.9}
    busy = {"fp32": 0.2, "bf16": 0.04}  # 22x low
    assert best_peaks(busy, 40.0) == ({"fp32": 0.2, "bf16": 0.2}, 40.0, True, ["bf16"])
    assert best_peaks(busy, 40.0, {"bf16": 0.5}) == ({"fp32": 0.2, "bf16": 0.9}, 40.0, True,
                                                     [])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        bound = _one_thread_bound({"fp32": 0.1, "fp16": 1e-4})  # fp16: far below fp32's
        assert set(bound) == {"fp32"} and bound["fp32"] > 0
        assert torch.get_num_threads() == 2
        torch.set_num_threads(1)
        assert _one_thread_bound({"fp32": 0.1}) == {}  # one thread: nothing to bound
    finally:
        torch.set_num_threads(threads)


def test_a_peak_measured_again_higher_takes_its_own_words():
    """A helper's hunt (2026-12-05): after a floor verdict measured bf16 again, higher, the
    note still said bf16 was judged against "fp32 matmul (faster here than bf16's own, 0.0211
    ...)" under a header of bf16 0.867, and rows timed before kept the older % peak (the run's
    rows are put on its last peaks at its end: measure.speedrun)."""
    from flashbench.measure.roofline import Roofline

    stale = "fp32 matmul (faster here than bf16's own, 0.0211 TFLOP/s)"
    roof = Roofline({"fp32": 0.24, "bf16": 0.24}, 50.0, "how", {"bf16": stale},
                    measure=lambda: Roofline({"fp32": 0.2, "bf16": 0.87}, 40.0, "how"))
    assert roof.again() and roof.peak("bf16") == 0.87 and roof.peak("fp32") == 0.24
    assert roof.peak_used("bf16") == "bf16 matmul" and roof.copy_gbs == 50.0


def test_each_dtypes_floor_is_one_and_the_fastest_any_precision_shows():
    """A kernel may compute in any precision: every dtype's floor is the fastest bound any
    matmul showed, and its text names that one alone (fp16's read "the floor of the bf16
    matmul, 1.62 TFLOP/s" beside bf16's 2.71, a superseded floor among them: a probe)."""
    from flashbench.measure.roofline import measure_roofline

    roof = measure_roofline("cpu", ["fp16", "bf16", "fp32"])
    floors = {d: roof.floor.get(d, roof.tflops[d]) for d in ("fp16", "bf16", "fp32")}
    assert max(floors.values()) - min(floors.values()) <= 1e-9 * max(floors.values()), floors
    for d, how in roof.peak_how.items():
        assert how.count("the floor of") <= 1, how
        if d in roof.floor:
            assert f"{roof.floor[d]:.3g} TFLOP/s" in how, how
