"""Accuracy per kernel x dtype x causal, against the float64 reference.

TrackAccuracy: one case per run (``shape`` and ``dist`` parameters: B=1, H=2, N=1024,
d=64, standard-normal inputs, seed 0) in every modelled dtype but fp64, the fp8 dtypes
("fp8" = e4m3, "fp8_e5m2") judged like any other (flash_model: FlashAttention-3's FP8
forward with its defaults, against the fp8 standard model); TrackFP8Accuracy: the FP8
forward's variants (quant x incoherent) on FlashAttention-3's outlier inputs. Every number
is computed once per run in setup_cache by flashbench.measure.measure_accuracy; each
track_ returns one, with its unit. The grid is literal (asv addresses a combination by its
index, the same for every commit); tests/test_benchmarks.py holds it equal to flashbench's
registries, and backends that do not take a dtype are in skip_params. An Unavailable kernel
skips with its reason; a Failed one makes its tracks FAIL (common.KernelFailed): a broken
kernel is a failure in the history, never a gap. Units, rules, the interpreter:
docs/asv.md ("Suites").
"""

import numpy as np

from .common import BACKEND_DTYPES, TrackStandard, need, qkv, record_or_raise, shape_of
from .common import known_dtypes as _known
from .common import record_field as _field

KERNELS = ["flash_model", "torch-naive", "torch-sdpa", "sdpa-flash", "sdpa-efficient", "sdpa-cudnn",
           "sdpa-math", "triton", "triton-fp8", "flex"]
DTYPES = ["fp32", "tf32", "fp16", "bf16", "fp8", "fp8_e5m2"]
SHAPES = ["1x2x1024x1024x64"]
DISTS = ["normal"]


def _not_applicable() -> list[tuple]:
    """Grid points whose backend does not take the dtype (common.BACKEND_DTYPES, the
    registry's, literal): asv's ``skip_params`` skips them without running setup, and
    says so."""
    return [(k, d, c, s, dist) for k in KERNELS if k in BACKEND_DTYPES for d in DTYPES
            if d not in BACKEND_DTYPES[k] for c in (False, True) for s in SHAPES
            for dist in DISTS]


class TrackAccuracy:
    params = (KERNELS, DTYPES, [False, True], SHAPES, DISTS)
    param_names = ["kernel", "dtype", "causal", "shape", "dist"]
    skip_params = _not_applicable()
    timeout = 900

    def setup_cache(self):
        try:
            Case, measure = need(("measure", "check"), "Case", "measure_accuracy")
            backends = need("backends", "BACKENDS")
        except NotImplementedError as exc:  # an older commit: every benchmark skips
            return {"missing": str(exc)}
        dtypes = _known(DTYPES)  # a dtype this commit does not model: no record, skipped
        results = {}
        for shape in SHAPES:
            for causal in (False, True):
                case = Case(shape_of(shape), "normal", causal)
                kernels = [k for k in KERNELS if k == "flash_model" or k in backends]
                found = measure(case, dtypes, kernels)
                if isinstance(found, dict):  # older commits: {(kernel, dtype): dict or str}
                    found = [(kernel, dtype, rec) for (kernel, dtype), rec in found.items()]
                else:
                    found = [(r.kernel, r.dtype, r) for r in found]
                for kernel, dtype, rec in found:
                    results[(kernel, dtype, causal, shape)] = rec
        return results

    def setup(self, results, kernel, dtype, causal, shape, dist):
        """The record, or skip (Unavailable: it cannot run here; older commits) or FAIL
        (a Failed record: the kernel raised, returned the wrong shape, NaN...)."""
        rec = results.get((kernel, dtype, causal, shape))
        if rec is None:
            rec = results.get("missing", f"no record for {kernel} {dtype} in this commit")
        self.rec = record_or_raise(rec, f"{kernel} {dtype} ({shape}"
                                        f"{' causal' if causal else ''})")

    def track_o_max_abs(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o")["max_abs"]

    track_o_max_abs.unit = "max |O - O_fp64|"

    def track_o_rmse(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o")["rmse"]

    track_o_rmse.unit = "RMSE of O vs fp64"

    def track_o_rel_p99(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o")["rel_p99"]

    track_o_rel_p99.unit = "p99 relative error of O"

    def track_lse_max_abs(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "lse")["max_abs"]

    track_lse_max_abs.unit = "max |LSE - LSE_fp64|"

    def track_o_baseline_ratio(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o_ratio")

    track_o_baseline_ratio.unit = "x standard_model error (O max abs)"

    def track_lse_baseline_ratio(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "lse_ratio")

    track_lse_baseline_ratio.unit = "x standard_model error (LSE max abs)"

    def track_o_band_ratio(self, results, kernel, dtype, causal, shape, dist):
        return _field(self.rec, "o_band_ratio")

    track_o_band_ratio.unit = "ratio"

    def track_lse_band_ratio(self, results, kernel, dtype, causal, shape, dist):
        # a stand-in LSE (a peer that returns none) is never judged: not applicable, NaN
        # (raising here would record a failure: only setup may skip)
        if getattr(self.rec, "lse_band_ratio", 0) is None:
            return float("nan")
        return _field(self.rec, "lse_band_ratio")

    track_lse_band_ratio.unit = "ratio"


class TrackStandardModel(TrackStandard):
    """The forward standard model's own error (common.TrackStandard), TrackAccuracy's
    inputs (seed 0, N(0, 1)) and dtypes: the yardstick of its baseline ratios."""

    params = (DTYPES, [False, True], SHAPES)

    def setup_cache(self):
        return self.errors_of_standard()

    def track_standard_o_max_abs(self, results, dtype, causal, shape):
        return self.error("o")

    track_standard_o_max_abs.unit = "max |O_standard_model - O_fp64|"

    def track_standard_lse_max_abs(self, results, dtype, causal, shape):
        return self.error("lse")

    track_standard_lse_max_abs.unit = "max |LSE_standard_model - LSE_fp64|"


class TrackReference:
    """The float64 reference itself, against attention computed here (numpy and scipy's
    logsumexp, never the commit's flashbench) on inputs drawn here: every accuracy track
    measures kernels against the commit's reference, so a head that degraded it (computing
    in float32: error 5e-8) read "better" or "same" on every kernel's row, a probe
    (2026-12-07). Its error over the exactness tolerance (1e-12 x max(1, the largest |value|),
    DESIGN.md): at most 1 passes; read 0.01 where below that (float64 rounding, which a change
    of summation order moves: no verdict should). And the inputs every accuracy track draws
    (flashbench.inputs.make_qkv, "normal", seed 0) against the suite's own draws: a head
    that drew easier ones (zeros, a smaller spread) read every row "better"."""

    params = ([False, True], SHAPES)
    param_names = ["causal", "shape"]
    FLOOR = 0.01

    def setup_cache(self):
        import scipy.special

        try:
            attention = need("reference", "attention")
            need("inputs", "make_qkv", "Shape")
        except NotImplementedError as exc:
            return {"missing": str(exc)}
        results = {}
        for shape in SHAPES:
            b, h, nq, nk, d = (int(x) for x in shape.split("x"))
            rng = np.random.default_rng(0)  # make_qkv's "normal": q, k, v drawn in turn
            q, k, v = (rng.standard_normal((b, h, n, d)) for n in (nq, nk, nk))
            inputs = max(self._over(x, t, 1e-12) for x, t in zip(qkv(shape), (q, k, v),
                                                                 strict=True))
            for causal in (False, True):
                s = q @ k.swapaxes(-1, -2) / np.sqrt(d)
                if causal:  # bottom-right, as FlashAttention aligns it
                    s = np.where(np.tri(nq, nk, nk - nq, dtype=bool), s, -np.inf)
                lse = scipy.special.logsumexp(s, axis=-1)
                o = np.exp(s - lse[..., None]) @ v
                got = attention(q, k, v, causal=causal)
                results[(causal, shape)] = {"inputs": inputs, **{
                    name: self._over(x, t, 1e-12 * max(1.0, float(np.max(np.abs(t)))))
                    for name, x, t in (("o", got[0], o), ("lse", got[1], lse))}}
        return results

    @classmethod
    def _over(cls, got, want, tol: float) -> float:
        """max |got - want| / ``tol``, :attr:`FLOOR` where below it; inf where that is not
        finite or ``got`` has another shape (a NaN reference read the floor, a pass)."""
        got = np.asarray(got, np.float64)
        if got.shape != want.shape:
            return float("inf")
        err = float(np.max(np.abs(got - want)))
        return max(cls.FLOOR, err / tol) if np.isfinite(err) else float("inf")

    def setup(self, results, causal, shape):
        if "missing" in results:
            raise NotImplementedError(results["missing"])
        self.errors = results[(causal, shape)]

    def track_reference_o_exactness(self, results, causal, shape):
        return self.errors["o"]

    track_reference_o_exactness.unit = ("max |O_reference - O_here| / (1e-12 x max(1, max |O|))"
                                        ", 0.01 where below")

    def track_reference_lse_exactness(self, results, causal, shape):
        return self.errors["lse"]

    track_reference_lse_exactness.unit = ("max |LSE_reference - LSE_here| / (1e-12 x max(1, "
                                          "max |LSE|)), 0.01 where below")

    def track_inputs_exactness(self, results, causal, shape):
        return self.errors["inputs"]

    track_inputs_exactness.unit = ("max |make_qkv's q, k, v - the suite's draws| / 1e-12, 0.01 "
                                   "where below")


FP8_DTYPES = ["fp8", "fp8_e5m2"]
FP8_SHAPES = ["1x2x1024x1024x128"]
FP8_DISTS = ["outliers", "normal"]


class TrackFP8Accuracy:
    """RMSE of FlashAttention-3 style FP8 forwards (flash_model's quant x incoherent
    options) against the float64 reference, seed 0, not causal, beside the fp8 baseline
    (standard_model in the same dtype). ``outliers`` is the input of FlashAttention-3's
    Table 3 (``flashbench table fa3`` reruns the whole table)."""

    params = (FP8_DTYPES, ["block", "tensor"], [True, False], FP8_SHAPES, FP8_DISTS)
    param_names = ["dtype", "quant", "incoherent", "shape", "dist"]
    timeout = 900

    def setup_cache(self):
        try:
            flash_model, standard_model = need("numerics", "flash_model", "standard_model")
            attention = need("reference", "attention")
            error_stats = need("accuracy", "error_stats")
            make_qkv = need("inputs", "make_qkv")
            dtypes = _known(FP8_DTYPES)
        except NotImplementedError as exc:  # an older commit: every benchmark skips
            return {"missing": str(exc)}
        results = {}
        for shape in FP8_SHAPES:
            for dist in FP8_DISTS:
                q, k, v = make_qkv(shape_of(shape), dist, 0)
                ref = attention(q, k, v)[0]
                for dtype in dtypes:
                    base = error_stats(standard_model(q, k, v, dtype)[0], ref)["rmse"]
                    for quant in ("block", "tensor"):
                        for incoherent in (True, False):
                            key = (dtype, quant, incoherent, shape, dist)
                            try:
                                o = flash_model(q, k, v, dtype, quant=quant,
                                                incoherent=incoherent)[0]
                            except TypeError as exc:  # a commit without the FP8 options
                                results[key] = f"flash_model takes no fp8 options here: {exc}"
                                continue
                            st = error_stats(o, ref)
                            results[key] = {"rmse": st["rmse"], "max_abs": st["max_abs"],
                                            "vs_baseline": st["rmse"] / base}
        return results

    def setup(self, results, dtype, quant, incoherent, shape, dist):
        rec = results.get((dtype, quant, incoherent, shape, dist))
        if rec is None:
            rec = results.get("missing", f"this commit does not model {dtype} (no fp8 models)")
        if isinstance(rec, str):
            raise NotImplementedError(rec)
        self.rec = rec

    def track_o_rmse(self, results, dtype, quant, incoherent, shape, dist):
        return self.rec["rmse"]

    track_o_rmse.unit = "RMSE of O vs fp64"

    def track_o_max_abs(self, results, dtype, quant, incoherent, shape, dist):
        return self.rec["max_abs"]

    track_o_max_abs.unit = "max |O - O_fp64|"

    def track_o_rmse_vs_baseline(self, results, dtype, quant, incoherent, shape, dist):
        return self.rec["vs_baseline"]

    track_o_rmse_vs_baseline.unit = "x RMSE of the fp8 baseline (standard_model)"
