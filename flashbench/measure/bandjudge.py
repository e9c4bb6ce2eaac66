"""The band rule's side of a measurement: bands, references and verdicts for one case.

:mod:`flashbench.measure.forward` and :mod:`.backward` judge each kernel by both rules;
this module holds the band rule's part, so that each needs a line or two. For one case
(and its inputs) :class:`CaseBands` makes, once and only when first asked, per precision:
the band (:func:`flashbench.bands.case.case_band`: the shipped table's, else measured with
the case's variant and cached) and the float64 reference (with that variant) of the inputs
as a dtype's kernel receives them (rounded to its storage format; fp8 kernels quantise
themselves), against which the band rule measures the kernel
(:func:`flashbench.accuracy.bandrule.band_rule`). :func:`combine` joins both rules into the
record's fields. Precisions arrive resolved (:class:`~flashbench.inputs.precision.Precision`).
"""

from __future__ import annotations

import numpy as np

from flashbench import reference
from flashbench.accuracy import error_stats
from flashbench.accuracy.bandrule import BandVerdict, band_rule, rules_disagree
from flashbench.bands.case import case_band
from flashbench.bands.decode import BAND_DTYPES, decode_band
from flashbench.bands.measure import caller_inputs, storage_key
from flashbench.inputs.precision import Precision

__all__ = ["CaseBands", "DecodeBands", "combine", "block_baseline", "band_tolerance",
           "band_words", "DRAW"]


class CaseBands:
    """Bands and rounded-input references of one case (module docstring). ``inputs``: the
    float64 (q, k, v) (packed [total, heads, d] for a varlen case), or (q, k, v, do) with
    ``grad=True``; ``seed``: the inputs' (the
    case's keywords, :meth:`~flashbench.measure.records.Case.kwargs`, draw its sinks from
    it). ``apply`` False: inputs not drawn from the case's distribution, which the band
    describes: no band verdicts."""

    def __init__(self, case, inputs, grad: bool = False, apply: bool = True, seed: int = 0):
        self.case, self.inputs, self.grad, self.apply = case, tuple(inputs), grad, apply
        self.kwargs = case.kwargs(seed)
        self._refs: dict = {}
        self._bands: dict = {}

    def band(self, prec: Precision) -> dict:
        if prec.name not in self._bands:
            c = self.case
            self._bands[prec.name] = case_band(c.shape, c.dist, c.causal, prec, grad=self.grad,
                                               window=c.window, softcap=c.softcap,
                                               sinks=c.sinks, varlen=c.varlen,
                                               varlen_k=c.varlen_k)
        return self._bands[prec.name]

    def reference(self, prec: Precision):
        key = storage_key(prec)
        if key not in self._refs:
            given = [caller_inputs(prec, x) for x in self.inputs]
            if self.case.varlen is not None:  # a packed batch [total, heads, d]
                cu, cu_k = (np.concatenate([[0], np.cumsum(n)])
                            for n in (self.case.varlen, self.case.key_lengths))
                fn = reference.varlen_attention_grad if self.grad else reference.varlen_attention
                self._refs[key] = fn(*given, cu, cu_k, **self.kwargs)[:3]
            elif self.grad:
                self._refs[key] = reference.attention_grad(*given, **self.kwargs)[:3]
            else:
                self._refs[key] = reference.attention(*given, **self.kwargs)
        return self._refs[key]

    def judge(self, prec: Precision, out, tensors) -> dict[str, BandVerdict] | None:
        """{tensor: BandVerdict} for the kernel outputs ``out`` (indexed like ``tensors``:
        ("o", "lse") or ("dq", "dk", "dv")); None where the band rule is off (``apply``) or
        has no band (fp64)."""
        if not self.apply or prec.name == "fp64":
            return None  # fp64: the flash model equals the reference, there is no band
        band, ref = self.band(prec), self.reference(prec)
        return {t: band_rule(error_stats(out[i], ref[i]), band["edges"][t], t,
                             self.case.dist, band["source"])
                for i, t in enumerate(tensors) if t is not None}


class DecodeBands(CaseBands):
    """:class:`CaseBands` of a decode case (:class:`flashbench.measure.decode.DecodeCase`):
    the split model's bands (:func:`flashbench.bands.decode.decode_band`) and the float64
    decode of ``inputs`` (q, k_cache, v_cache, cache_seqlens, block_table), q, k, v rounded
    as a dtype's kernel receives them; ``apply`` as for CaseBands. Judges only
    :data:`~flashbench.bands.decode.BAND_DTYPES` (others: the baseline rule alone)."""

    def __init__(self, case, inputs, apply: bool = True):
        self.case, self.inputs, self.grad, self.apply = case, tuple(inputs), False, apply
        self._refs: dict = {}
        self._bands: dict = {}

    def band(self, prec: Precision) -> dict:
        if prec.name not in self._bands:
            self._bands[prec.name] = decode_band(self.case, prec)
        return self._bands[prec.name]

    def reference(self, prec: Precision):
        key = storage_key(prec)
        if key not in self._refs:
            q, k, v, lens, table = self.inputs
            given = [caller_inputs(prec, x) for x in (q, k, v)]
            self._refs[key] = reference.decode_attention(*given, lens, table,
                                                         causal=self.case.causal)
        return self._refs[key]

    def judge(self, prec: Precision, out, tensors) -> dict | None:
        return super().judge(prec, out, tensors) if prec.name in BAND_DTYPES else None


DRAW = ("not counted: the baseline rule is a draw on this case (the flash model is a correct "
        "kernel by construction); its band rule judged alone: ")


def combine(baseline: dict, band: dict[str, BandVerdict] | None, limit: float,
            dtype: str | None = None, model: bool = False) -> dict:
    """Record fields from both rules: ``baseline`` {tensor: (ratio, passed)} and ``band``
    {tensor: BandVerdict}: ``<t>_band_ratio``, ``band`` (verdicts as dicts),
    ``baseline_passed``, ``band_passed``, ``passed`` (both) and ``disagreement`` (one line
    per tensor where the rules disagree, joined; None where they agree). ``band`` None:
    the band rule was not applied (inputs not drawn from the case's distribution); ``dtype``
    the likely causes' (:func:`~flashbench.accuracy.bandrule.likely_cause`). ``model``:
    the flash model's own record, a correct kernel by construction: where its baseline
    rule fails and its band rule passes, that failure is the rule's draw (a max over few
    values, docs/check.md), so ``passed`` is the band rule's and ``baseline_draw`` says so;
    a kernel's never is."""
    if band is None:
        base_ok = all(p for _, p in baseline.values())
        return {"baseline_passed": base_ok, "passed": base_ok}
    fields = {f"{t}_band_ratio": v.ratio for t, v in band.items()}
    lines = [rules_disagree(t, baseline[t][1], baseline[t][0], limit, v, dtype)
             for t, v in band.items() if t in baseline]
    lines = [x for x in lines if x]
    base_ok = all(p for _, p in baseline.values())
    band_ok = all(v.passed for v in band.values())
    if not lines and base_ok != band_ok:  # they disagree on different tensors
        lines = [f"baseline rule {'PASS' if base_ok else 'FAIL'}, band rule "
                 f"{'PASS' if band_ok else 'FAIL'}"]
    drawn = model and not base_ok and band_ok
    text = "; ".join(lines) or None
    return {**fields, "band": {t: v.as_dict() for t, v in band.items()},
            "baseline_passed": base_ok, "band_passed": band_ok,
            "passed": band_ok and (base_ok or drawn),
            "disagreement": DRAW + (text or "") if drawn else text,
            **({"baseline_draw": True} if drawn else {})}


def block_baseline(q, k, v, rows, err: float, dtype: str, causal: bool, block: int = 64):
    """(verdict, yardstick) of a forward's error on a few ``rows`` (``flashbench speed``'s
    judge) by the baseline rule against the same-dtype standard attention's error, else the
    flash model's (as ``check`` judges), each computed on ``block`` consecutive query rows
    around every checked row, as a matrix product rounds them: a row computed alone rounds
    otherwise, and an honest fp32 sdpa failed 1 content in 400 (1x8x1024x64, one thread)
    against the standard attention of its checked rows alone. Bounded by the blocks, not
    the whole output (H x N^2 floats). q, k, v: float64, k and v with q's heads."""
    from flashbench import numerics
    from flashbench.accuracy import baseline_rule

    nq, nk = q.shape[-2], k.shape[-2]
    std = flash = 0.0
    for start in sorted({max(0, min(int(i) - block // 2, nq - block)) for i in rows}):
        stop = min(nq, start + block)
        see = stop + nk - nq if causal else nk  # keys the block's last row sees
        if see <= 0:
            continue
        # bottom-right aligned: row start + r sees keys [0, see - (stop - start) + r]
        qb, kb, vb = q[..., start:stop, :], k[..., :see, :], v[..., :see, :]
        ref = reference.attention(qb, kb, vb, causal=causal)[0]
        errs = [float(np.nanmax(np.abs(np.asarray(model(qb, kb, vb, dtype, causal=causal)[0],
                                                  np.float64) - ref)))
                for model in (numerics.standard_model, numerics.flash_model)]
        std, flash = max(std, errs[0]), max(flash, errs[1])
    return baseline_rule(err, std, dtype, fallback_error=flash), std


def band_tolerance(case, nq: int, nk: int, tensor: str = "o") -> float | None:
    """The max-abs tolerance of the shipped band table for a speed case's ``tensor`` (the
    flash model's measured edge x 2), or None where the table does not cover it (then: the
    baseline rule). The table's head dim, d = 64, for every case: a band measured at the
    case's own (``tolerance(..., d=)``) costs seconds to minutes on the CPU the first time,
    inside a speed run; :func:`band_words` says so in a row's reason."""
    from flashbench.bands.table import tolerance

    try:
        return tolerance(case.dtype, nk, causal=case.causal, nq=nq, tensor=tensor)
    except ValueError:
        return None


def band_words(case) -> str:
    """Where a speed row's band tolerance comes from: the shipped table, and its d = 64 when
    the case's head dims differ (a red team read "tolerance 3.13e-06 (flashbench.tolerance)"
    for a 192/128 case whose own band is 4.49e-06)."""
    s = case.shape
    dims = f"{s.d}" if s.dv is None or s.dv == s.d else f"{s.d}/{s.dv}"
    return ("flashbench.tolerance" if dims == "64" else
            f"flashbench.tolerance's table, at d = 64: this case's d = {dims}")
