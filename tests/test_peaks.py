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
