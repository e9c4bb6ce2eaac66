"""The same run's roofline: matmul peaks per precision and copy bandwidth, measured now.

On a GPU by :mod:`flashbench.measure.timing` (CUDA events, L2 flushed); on a CPU the best of
10 host-timed 1024^3 matmuls and 64 MiB copies, raised to the best this machine has shown
(:mod:`flashbench.measure.peaks`). A precision's peak is the fastest matmul a kernel of it
may use (its arithmetic may be wider or run on other units than its inputs' dtype):
:mod:`flashbench.measure.speed` judges the floor and % peak against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from flashbench.measure.peaks import (
    CAP,
    PEAKS_FILE,
    best_peaks,
    peaks_file,
    remembered,
    unreadable,
)

__all__ = ["Roofline", "measure_roofline", "fp8_peak_tflops"]


@dataclass
class Roofline:
    """The peaks, the best this machine has measured (this run's included: :mod:`.peaks`):
    matmul TFLOP/s per precision, copy GB/s (1e9 B/s)."""

    tflops: dict
    copy_gbs: float
    how: str
    peak_how: dict = field(default_factory=dict)  # dtype -> which peak stands for it
    measure: object = field(default=None, repr=False, compare=False)  # () -> a new Roofline
    floor: dict = field(default_factory=dict)  # dtype -> the floor's peak, where not its own

    def again(self) -> bool:
        """Measure the peaks again now and keep the higher of each: a peak first measured
        while the machine was busy is too low, its floor too high (a correct kernel would
        fail it). Once a run (on a GPU it is seconds of matmuls); False where this roofline
        cannot be measured again (a fixed one, or measured again already)."""
        if self.measure is None:
            return False
        new, self.measure = self.measure(), None
        for d, t in self.tflops.items():  # the words of a peak now measured higher are new
            if new.tflops.get(d, t) > t:
                self.peak_how.pop(d, None)
                self.peak_how.update({d: new.peak_how[d]} if d in new.peak_how else {})
        self.tflops = {d: max(t, new.tflops.get(d, t)) for d, t in self.tflops.items()}
        self.floor = {d: max(t, new.floor.get(d, t)) for d, t in self.floor.items()}
        self.copy_gbs = max(self.copy_gbs, new.copy_gbs)
        return True

    def peak(self, dtype: str) -> float:
        """The peak % peak is of."""
        return self.tflops.get(dtype, max(self.tflops.values()))

    def floor_peak(self, dtype: str) -> float:
        """The peak the roofline floor is of: the fastest matmul a kernel of ``dtype`` may
        use (an fp32 row's on a GPU: the tensor cores', where its tf32 dots run)."""
        return max(self.floor.get(dtype, 0.0), self.peak(dtype))

    def peak_used(self, dtype: str) -> str:
        """Which measured peak a row of ``dtype`` is judged against, in words."""
        if dtype in self.peak_how:
            return self.peak_how[dtype]
        if dtype in self.tflops:
            return f"{dtype} matmul"
        return f"{max(self.tflops, key=self.tflops.get)} matmul (none measured in {dtype})"


def fp8_peak_tflops(n: int = 8192) -> float | None:
    """Measured e4m3 x e4m3 -> bf16 ``torch._scaled_mm`` TFLOP/s (n^3, CUDA events, L2
    flushed, median of 20: :func:`flashbench.measure.timing.device_seconds`); None where
    torch or the device has no fp8 matmul (before compute capability 8.9)."""
    import torch

    if not hasattr(torch, "_scaled_mm") or torch.cuda.get_device_capability() < (8, 9):
        return None
    from flashbench.measure.timing import device_seconds

    a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()  # column-major
    one = torch.ones((), device="cuda")
    try:
        seconds = device_seconds(lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                          out_dtype=torch.bfloat16))
    except (RuntimeError, TypeError):  # this torch build's _scaled_mm refuses: no peak
        return None
    return 2.0 * n**3 / seconds * 1e-12


def _best_time(fn, repeats: int = 10) -> float:
    import timeit

    return min(timeit.repeat(fn, repeat=repeats + 1, number=1)[1:])  # the first: warm-up


def measure_roofline(device: str, dtypes) -> Roofline:
    """Matmul TFLOP/s of each dtype and copy GB/s measured now on ``device``: on a GPU by
    :mod:`flashbench.measure.timing` (CUDA events, L2 flushed, medians); on a CPU the best of
    10 host-timed 1024^3 torch.matmul / 64 MiB copies (a busy machine must not raise floors)."""
    import torch

    from flashbench.timed.attention import torch_dtype as _torch_dtype

    if device == "cuda":
        from flashbench.measure.timing import copy_bandwidth_gbs, matmul_peak_tflops

        peaks, how, floor = {}, {}, {}
        for d in dict.fromkeys(dtypes):
            fp8 = fp8_peak_tflops() if d.startswith("fp8") else None
            if fp8 is not None:
                peaks[d], how[d] = fp8, "fp8 e4m3 torch._scaled_mm"
                continue
            mm = d if d in ("fp16", "bf16", "fp32", "tf32") else "bf16"
            peaks[d] = matmul_peak_tflops(mm)
            if mm != d:
                how[d] = f"{mm} matmul (no {d} matmul peak on this device)"
        for d in ("fp32", "tf32"):  # their dots may run on the tensor cores in 16 bits
            if d not in peaks:  # (tf32's 10-bit mantissa is fp16's): the floor of the bf16
                continue  # matmul, their % peak of their own (a review, 2026-12-07)
            try:
                tensor = peaks.get("bf16") or matmul_peak_tflops("bf16")
            except RuntimeError:  # a device without a bf16 matmul: their own
                tensor = 0.0
            if tensor > peaks[d]:
                floor[d] = tensor
                how[d] = (f"{d} matmul; the floor of the bf16 matmul, {tensor:.3g} TFLOP/s "
                          "(the tensor cores, where a kernel's dots may run in 16 bits)")
        return Roofline(peaks, copy_bandwidth_gbs(), "CUDA events, L2 flushed, median of 20: "
                        "8192^3 torch.matmul (fp8: torch._scaled_mm); 2 GiB device copy; "
                        "measured again before a floor verdict", how,
                        measure=lambda: measure_roofline(device, dtypes), floor=floor)
    peaks, known = {}, remembered()
    for d in dict.fromkeys(["fp32", *(d for d in dtypes if not d.startswith("fp8"))]):
        # another precision first at 256^3: where it is far below fp32 (a CPU's fp16 matmul
        # ran 2 s a 1024^3 call) the fastest stands for it, and 20 s of matmuls are spared;
        # not where this machine has shown it fast (a busy CPU ran bf16's 256^3 50-250x
        # slow, and a correct bf16 kernel FAILed the floor in 3 runs of 7)
        for n, repeats in ((256, 3), (1024, 10)) if d != "fp32" else ((1024, 10),):
            a = torch.randn(n, n).to(_torch_dtype(d))
            peaks[d] = 2.0 * n**3 / _best_time(lambda a=a: a @ a, repeats) * 1e-12
            if peaks[d] < 0.5 * peaks["fp32"] and known.get(d, 0.0) < 0.5 * peaks["fp32"]:
                break
    single = _one_thread_bound(peaks)
    bounds = {d: max(p, single.get(d, 0.0)) for d, p in peaks.items()}
    fp8 = {d: max(peaks, key=peaks.get) for d in dtypes if d.startswith("fp8")}  # emulated
    src = torch.empty(16 * 1024**2).normal_()
    dst = torch.empty_like(src)
    gbs = 2.0 * src.numel() * 4 / _best_time(lambda: dst.copy_(src)) * 1e-9
    ran = {**peaks, "copy": gbs}  # this run's own, said where a remembered one is used
    bad = unreadable()  # a corrupt peaks file: said, not replaced silently
    peaks, gbs, raised, capped = best_peaks(peaks, gbs, bounds)
    peaks.update({d: peaks[m] for d, m in fp8.items()})
    # a kernel may compute in fp32 whatever its inputs, and in any precision at all: % peak
    # of the faster of its own matmul and fp32's (a CPU's fp16 matmul, 0.001 TFLOP/s here,
    # failed torch's own SDPA "below the roofline floor"), the floor of the fastest measured
    fastest = max(peaks, key=peaks.get)
    how = ("host clock, best of 10: 1024^3 torch.matmul; 64 MiB copy; the best this machine "
           f"has measured (kept in {peaks_file()}, measure.peaks" + (
               ": this run measured less: " + ", ".join(
                   f"{d} {v:.3g}" + (" GB/s" if d == "copy" else "") for d, v in ran.items())
               if raised else "")
           + (f"; remembered {', '.join(capped)} over {CAP:g}x this run's: capped there "
              "(a busy machine measures low; a corrupt or tampered peaks.json remembers "
              "high)" if capped else "")
           + (f"; {PEAKS_FILE} unreadable ({bad}): rewritten" if bad else "")
           + "); measured again before a floor verdict")
    used = {d: f"{m} matmul (a CPU's fp8 matmul is emulated, 0.0008 TFLOP/s)"
            for d, m in fp8.items()}
    floor = {}
    for d in (d for d in dict.fromkeys(dtypes) if d in peaks and d not in fp8):
        own = peaks[d]
        if own < peaks["fp32"] and d != "fp64":  # an fp64 kernel in fp32 fails its check
            peaks[d] = peaks["fp32"]
            used[d] = (f"fp32 matmul (faster here than {d}'s own, {own:.3g} TFLOP/s: a "
                       "kernel may compute in fp32)")
        # the floor: the highest of these over its own peak, and that one alone said (a
        # superseded one beside it read as a second floor: a probe, 2026-12-07)
        quick = max(single, key=single.get, default=d)  # any precision, as the fastest's
        above = [(single.get(quick, 0.0), f"one thread's x the threads ({quick} matmul), "
                  f"{single.get(quick, 0.0):.3g} TFLOP/s (a busy CPU slows a parallel matmul "
                  "most)"),
                 (peaks[fastest], f"the {fastest} matmul, {peaks[fastest]:.3g} TFLOP/s (the "
                  "fastest measured here)")]
        top, words = max(above, key=lambda x: x[0])
        if top > peaks[d]:
            floor[d] = top
            used[d] = used.get(d, f"{d} matmul") + f"; the floor of {words}"
    return Roofline(peaks, gbs, how, used, measure=lambda: measure_roofline(device, dtypes),
                    floor=floor)


def _one_thread_bound(peaks: dict) -> dict:
    """{dtype: its 1024^3 matmul on one torch thread x the threads}, for the precisions at
    least half fp32's: an upper bound of the parallel matmul that a busy CPU hardly lowers
    (one thread waits for no other; under two busy loops a parallel bf16 matmul read 20x
    low, and a correct bf16 kernel FAILed the floor 3 runs in 7). The floor is of it where
    it is higher, and a remembered peak is capped at CAP x it (:mod:`.peaks`)."""
    import torch

    from flashbench.timed.attention import torch_dtype as _torch_dtype

    threads = torch.get_num_threads()
    if threads < 2:
        return {}
    bound = {}
    torch.set_num_threads(1)
    try:
        for d, p in peaks.items():
            if d == "fp32" or p >= 0.5 * peaks["fp32"]:
                a = torch.randn(1024, 1024).to(_torch_dtype(d))
                bound[d] = threads * 2.0 * 1024**3 / _best_time(lambda a=a: a @ a, 3) * 1e-12
    finally:
        torch.set_num_threads(threads)
    return bound

