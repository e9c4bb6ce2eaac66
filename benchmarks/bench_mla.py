"""Accuracy of DeepSeek's absorbed MLA decode (issue 37), per commit: one latent kv head
shared by 16 query heads, a paged cache of 256 keys holding d_qk = 576 columns whose first
d_v = 512 are V (``1x16/1x1x576/512:256:p64:mla``, causal, standard-normal, seed 0).

TrackMLADecodeAccuracy: the split model and the decode backends (the Triton kernel's
absorbed path, interpreted without a GPU; torch's peers on V handed as a view of K) in
fp32 and bf16, measured once per run in setup_cache by flashbench.measure.decode's
measure_decode as bench_decode's TrackDecodeAccuracy is (a class of its own, so that
suite's series go on unchanged). A commit whose decode case reads no ``d/dv`` or ``:mla``
skips every benchmark with the reason; a Failed record FAILS the track, never skips.

Units: errors are unitless; ratios are kernel error / the same-dtype standard decode's (the
baseline rule passes at <= 2), band ratios the band rule's against the split model's band
measured at 576/512 (bf16; passing at <= 1; NaN where not judged). docs/decode.md ("MLA").
"""

from .common import band_ratio as _band_ratio
from .common import need, record_or_raise

KERNELS = ["split_model", "triton", "torch-naive", "torch-sdpa", "flex"]
DTYPES = ["fp32", "bf16"]
CASES = ["1x16/1x1x576/512:256:p64:mla"]


class TrackMLADecodeAccuracy:
    """The absorbed MLA decode against the float64 decode (measure_decode)."""

    params = (KERNELS, DTYPES, CASES)
    param_names = ["kernel", "dtype", "case"]
    timeout = 900

    def setup_cache(self):
        try:
            DecodeCase, measure = need(("measure.decode",), "DecodeCase", "measure_decode")
            registry = need(("backends.decode",), "DECODE_BACKENDS")
        except NotImplementedError as exc:  # a commit before decode: every benchmark skips
            return {"missing": str(exc)}
        results = {}
        for spec in CASES:
            try:
                case = DecodeCase.parse(spec)
            except ValueError as exc:  # a commit whose decode case reads no d/dv or :mla
                return {"missing": f"this commit cannot read decode case {spec}: {exc}"}
            kernels = [k for k in KERNELS if k == "split_model" or k in registry]
            for rec in measure(case, DTYPES, kernels):
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
