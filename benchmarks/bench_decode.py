"""Decode over a KV cache: accuracy per kernel x dtype, the merge's loss per storage
format, and CPU timings of the float64 reference and the torch peers.

A decode case is a ``case`` parameter in the text form of
:class:`flashbench.measure.decode.DecodeCase`, ``BxH/HkvxNqxd:L1,L2,...[:pP]`` (ragged cache
lengths, pages of P keys), causal, standard-normal inputs, seed 0. Grids are literal
(asv addresses a grid point by its index, for every commit); tests/test_benchmarks.py holds
the kernel list equal to flashbench's decode registry. Commits before decode skip
(``common.need``); a Failed record FAILS the track, never skips.

Units: errors are unitless; ratios are kernel error / the same-dtype standard decode's
(the baseline rule passes at <= 2), band ratios the band rule's (fp16 and bf16, passing at
<= 1; NaN where not judged); times are seconds per call on this CPU.
"""

from functools import partial

import numpy as np
import scipy.special

from .common import Benchmark, FreshCalls, need, record_or_raise, verify
from .common import band_ratio as _band_ratio

KERNELS = ["split_model", "triton", "torch-naive", "torch-sdpa", "flex"]
DTYPES = ["fp32", "fp16", "bf16"]
CASES = ["4x8/2x4x64:1000,517,64,4:p64"]
STORES = ["fp32", "bf16", "fp16"]
MERGE_CASE = "2x8/2x4x64:2048,1031:p64"
MERGE_SPLITS = 16


def _case(spec: str):
    return need(("measure.decode",), "DecodeCase").parse(spec)


class TrackDecodeAccuracy:
    """Split model and decode backends against the float64 decode (measure_decode)."""

    params = (KERNELS, DTYPES, CASES)
    param_names = ["kernel", "dtype", "case"]
    timeout = 900

    def setup_cache(self):
        try:
            measure = need(("measure.decode",), "measure_decode")
            registry = need(("backends.decode",), "DECODE_BACKENDS")
        except NotImplementedError as exc:  # a commit before decode: every benchmark skips
            return {"missing": str(exc)}
        results = {}
        for spec in CASES:
            kernels = [k for k in KERNELS if k == "split_model" or k in registry]
            for rec in measure(_case(spec), DTYPES, kernels):
                results[(rec.kernel, rec.dtype, spec)] = rec
        return results

    def setup(self, results, kernel, dtype, case):
        rec = results.get((kernel, dtype, case))
        if rec is None:
            rec = results.get("missing", f"no record for {kernel} {dtype} in this commit")
        self.rec = record_or_raise(rec, f"{kernel} {dtype} ({case})")

    def track_o_max_abs(self, results, kernel, dtype, case):
        return self.rec.o["max_abs"]

    track_o_max_abs.unit = "max |O - O_fp64|"

    def track_o_baseline_ratio(self, results, kernel, dtype, case):
        return self.rec.o_ratio

    track_o_baseline_ratio.unit = "x standard decode error (O max abs)"

    def track_lse_baseline_ratio(self, results, kernel, dtype, case):
        if self.rec.lse_ratio is None:
            raise NotImplementedError(f"LSE {self.rec.lse_note}")
        return self.rec.lse_ratio

    track_lse_baseline_ratio.unit = "x standard decode error (LSE max abs)"

    def track_o_band_ratio(self, results, kernel, dtype, case):
        return _band_ratio(self.rec, "o")

    track_o_band_ratio.unit = "ratio"

    def track_lse_band_ratio(self, results, kernel, dtype, case):
        return _band_ratio(self.rec, "lse")

    track_lse_band_ratio.unit = "ratio"


class TrackDecodeMerge:
    """What the split-KV merge loses with O_s and LSE_s stored in 16 bits
    (numerics.split_decode_model, 16 splits; docs/decode.md)."""

    params = (["fp16", "bf16"], STORES, STORES)
    param_names = ["dtype", "partials", "lse_dtype"]
    timeout = 600

    def setup_cache(self):
        try:
            model, standard = need("numerics", "split_decode_model", "standard_decode_model")
            decode_inputs = need(("measure.decode",), "decode_inputs")
            decode_attention = need("reference", "decode_attention")
            judge = need("accuracy", "judge")
        except NotImplementedError as exc:
            return {"missing": str(exc)}
        case = _case(MERGE_CASE)
        inputs = decode_inputs(case)
        ref = decode_attention(*inputs, causal=True)
        results = {}
        for dtype in self.params[0]:
            std = standard(*inputs, dtype=dtype, causal=True)
            for part in STORES:
                for lse in STORES:
                    out = model(*inputs, dtype=dtype, causal=True, num_splits=MERGE_SPLITS,
                                partials=part, lse_dtype=lse)
                    results[(dtype, part, lse)] = judge(out, std, ref, dtype)
        return results

    def setup(self, results, dtype, partials, lse_dtype):
        if "missing" in results:
            raise NotImplementedError(results["missing"])
        self.j = results[(dtype, partials, lse_dtype)]

    def track_o_max_abs(self, results, dtype, partials, lse_dtype):
        return self.j["o"]["kernel"]["max_abs"]

    track_o_max_abs.unit = "max |O - O_fp64|"

    def track_o_baseline_ratio(self, results, dtype, partials, lse_dtype):
        return self.j["o"]["verdict"].ratio

    track_o_baseline_ratio.unit = "x standard decode error (O max abs)"

    def track_lse_baseline_ratio(self, results, dtype, partials, lse_dtype):
        return self.j["lse"]["verdict"].ratio

    track_lse_baseline_ratio.unit = "x standard decode error (LSE max abs)"


TIME_CASES = ["4x32/8x1x128:4096,2048,1024,512:p64", "2x32/8x4x128:4096,1500:p256"]


class TimeDecodeCPU(Benchmark):
    """Seconds per call on CPU: the float64 reference one-shot and split 8 ways, the torch
    peers' bare ops (fp32, gather included: torch has no paged op)."""

    params = (["reference", "reference-split8", "torch-naive", "torch-sdpa"], TIME_CASES)
    param_names = ["backend", "case"]

    def setup(self, backend, case):
        decode_inputs = need(("measure.decode",), "decode_inputs")
        decode = need("reference", "decode_attention")
        make = partial(decode_inputs, _case(case))
        if backend.startswith("reference"):
            splits = 8 if backend.endswith("split8") else 1

            def fn(*inputs):
                return decode(*inputs, causal=True, num_splits=splits)
            tol = 1e-12
        else:
            import torch

            b = need(("backends.decode",), "DECODE_BACKENDS")[backend]
            make = partial(_torch_inputs, make, torch)

            def fn(*inputs):
                return b.timed_fn(*inputs, causal=True)
            tol = 1e-4
        self.call = FreshCalls(case, fn, make, tol=tol, want=decode_heads, fresh=0)  # q

    def time_decode(self, backend, case):
        self.call()

    def teardown(self, backend, case):
        verify(self)


def _torch_inputs(make, torch, seed):
    q, k, v, lens, table = make(seed=seed)
    return (*(torch.from_numpy(x).float() for x in (q, k, v)), torch.from_numpy(lens).int(),
            torch.from_numpy(table).int())


def decode_heads(args, r):
    """Head ``r`` of every sequence's and every new token's output ([B, Nq, dv]) from the
    one-shot float64 decode of the inputs (q overwritten there: [B, Nq, H, d])."""
    q, k, v, lens, table = args
    decode = need("reference", "decode_attention")
    return decode(q, k, v, lens.astype(np.int64), table.astype(np.int64), causal=True)[0][..., r, :]


def merged_row(args, r):
    """Row ``r`` (axis -2) of the merge of ``(o_parts, lse_parts)`` by scipy's logsumexp
    (not the code under test): sum_s exp(lse_s - lse) o_s."""
    o, lse = args
    total = scipy.special.logsumexp(lse, axis=0)
    return (np.exp(lse - total)[..., None] * o).sum(axis=0)[..., r, :]


class TimeMergeStates(Benchmark):
    """Seconds per call of reference.merge_states: 16 chunks of [8, 32, 4, 128] float64."""

    def setup(self):
        merge = need("reference", "merge_states")

        def make(seed):
            rng = np.random.default_rng(seed)
            return rng.standard_normal((16, 8, 32, 4, 128)), rng.standard_normal((16, 8, 32, 4)) * 3

        # the LSEs rescaled a call: every row's weights change (a cache of unchanged rows
        # was right and faster); ~5% of a call here, side by side (a new series, 2026-12-05)
        self.call = FreshCalls("", merge, make, tol=1e-12, want=merged_row, fresh=1)  # lse

    def time_merge_states(self):
        self.call()

    def teardown(self):
        verify(self)
