"""The roofline's remembered peaks (flashbench.measure.peaks): a CPU peak measured while the
machine is busy never raises the floor above what the machine has shown it can do."""

import json

import torch

from flashbench.measure.peaks import PEAKS_FILE, best_peaks


def test_a_low_peak_is_raised_to_the_best_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    assert best_peaks({"fp32": 0.2}, 40.0) == ({"fp32": 0.2}, 40.0, False)
    # measured while two busy loops shared the CPUs: 4.6x low
    assert best_peaks({"fp32": 0.043}, 9.0) == ({"fp32": 0.2}, 40.0, True)
    assert best_peaks({"fp32": 0.3, "bf16": 0.9}, 50.0) == ({"fp32": 0.3, "bf16": 0.9}, 50.0,
                                                            False)
    assert best_peaks({"fp32": 0.1}, 1.0)[:2] == ({"fp32": 0.3}, 50.0)
    # another torch thread count is another machine for its peak
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        assert best_peaks({"fp32": 0.05}, 5.0) == ({"fp32": 0.05}, 5.0, False)
    finally:
        torch.set_num_threads(threads)


def test_an_unreadable_peaks_file_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHBENCH_CACHE", str(tmp_path))
    (tmp_path / PEAKS_FILE).write_text("{not json")
    assert best_peaks({"fp32": 0.2}, 40.0) == ({"fp32": 0.2}, 40.0, False)
    assert list(json.loads((tmp_path / PEAKS_FILE).read_text()).values()) == [40.0, 0.2]


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
