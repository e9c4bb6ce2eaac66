"""Decode cases of ``flashbench check --decode``, as records (rendered by
:mod:`flashbench.cli.decode`).

- :class:`DecodeCase`: batch, H/Hkv, Nq, d, ragged cache lengths, page size (None:
  contiguous), causal, distribution; text form ``BxH[/Hkv]xNqxd:L1,L2,...[:pP]``.
- :func:`decode_exactness`: float64 split-KV merged vs one-shot, one-shot vs the forward
  reference per sequence, paged vs contiguous (bit for bit): Exactness records.
- :func:`measure_decode`: the split model and decode backends per dtype against float64,
  the baseline rule against the standard decode and the band rule against the split
  model's band (:mod:`flashbench.bands.decode`): the forward's Accuracy / Unavailable /
  Failed records; optionally O's error against the rounded inputs' decode, to set beside
  the tolerance band's edge (:func:`band_edge`).
- :func:`decode_bytes`: the bytes a decode call must move (the GPU's GB/s).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from flashbench import numerics, reference
from flashbench.accuracy import error_stats
from flashbench.bands.decode import DECODE_SPLITS
from flashbench.bands.measure import caller_inputs
from flashbench.inputs.kvcache import make_decode
from flashbench.inputs.precision import Precision, get_precision
from flashbench.inputs.validation import head_group
from flashbench.measure.bandjudge import DecodeBands
from flashbench.measure.forward import (
    EXACT_TOL,
    INTERPRETER_LIMIT,
    INTERPRETER_NOTE,
    INTERPRETER_TOO_SLOW,
    Exactness,
    Unavailable,
    accuracy_record,
    attempt,
    handed,
    with_note,
)
from flashbench.reference.decode import sequence_cache

__all__ = ["DecodeCase", "default_decode_cases", "decode_exactness", "measure_decode",
           "band_edge", "MODEL", "MODEL_SPLITS", "decode_inputs", "run_decode_check",
           "decode_bytes", "handed_decode"]

MODEL = "split_model"  # the kernel name of the precision model's rows
MODEL_SPLITS = DECODE_SPLITS  # the split model's splits, in its row and its bands
_SPEC = re.compile(r"^(\d+)x(\d+)(?:/(\d+))?x(\d+)x(\d+):(\d+(?:,\d+)*)(?::p(\d+))?$")


@dataclass(frozen=True)
class DecodeCase:
    """One decode problem (module docstring); ``lens`` has one length per sequence."""

    B: int
    H: int
    Hkv: int
    Nq: int
    d: int
    lens: tuple[int, ...]
    page_size: int | None = None
    causal: bool = True
    dist: str = "normal"

    def __post_init__(self):
        for name in ("B", "H", "Hkv", "Nq", "d", "page_size"):
            value = getattr(self, name)
            if (value is not None or name != "page_size") and (
                    not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"DecodeCase.{name} must be an int >= 1, got {value!r}")
        head_group(self.H, self.Hkv, self.Hkv)
        if len(self.lens) != self.B:
            raise ValueError(f"a decode case with B={self.B} needs {self.B} cache "
                             f"length{'s' if self.B != 1 else ''} (one per sequence), got "
                             f"{len(self.lens)}: {','.join(map(str, self.lens))}")
        if any(n < 0 for n in self.lens):
            raise ValueError(f"a decode case's cache lengths must be ints >= 0, got "
                             f"{self.lens}")

    def spec(self) -> str:
        page = "" if self.page_size is None else f":p{self.page_size}"
        return (f"{self.B}x{self.H}/{self.Hkv}x{self.Nq}x{self.d}:"
                f"{','.join(map(str, self.lens))}{page}")

    def label(self) -> str:
        return f"{self.spec()} {self.dist}{' causal' if self.causal else ''}"

    @classmethod
    def parse(cls, text: str, causal: bool = True, dist: str = "normal") -> DecodeCase:
        """``BxH[/Hkv]xNqxd:L1,L2,...[:pP]`` (``4x32/8x1x128:4096,100,7,1:p64``)."""
        m = _SPEC.match(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"decode case must be BxH[/Hkv]xNqxd:L1,L2,...[:pPAGE] (one cache "
                             f"length per sequence), got {text!r}")
        b, h, hkv, nq, d = (int(x) if x else None for x in m.groups()[:5])
        return cls(b, h, h if hkv is None else hkv, nq, d,
                   tuple(int(x) for x in m[6].split(",")),
                   None if m[7] is None else int(m[7]), causal, dist)


def default_decode_cases() -> list[DecodeCase]:
    """Small enough for the interpreted kernel on a CPU: one token and speculative Nq,
    GQA to 8 and MQA, pages of 16 to 256 and a contiguous cache, ragged lengths."""
    return [DecodeCase(4, 8, 2, 1, 64, (1000, 517, 64, 1), 64),
            DecodeCase(2, 8, 1, 4, 64, (777, 2048), 16),
            DecodeCase(3, 16, 2, 16, 128, (300, 1200, 16), 256),
            DecodeCase(2, 4, 4, 2, 64, (500, 3), None, causal=False)]


def decode_inputs(case: DecodeCase, seed: int = 0):
    """float64 ``(q, k_cache, v_cache, cache_seqlens, block_table)`` of a case."""
    return make_decode(case.B, case.H, case.Hkv, case.Nq, case.d, case.lens, case.page_size,
                       dist=case.dist, seed=seed)


def _contiguous(inputs):
    q, k, v, lens, table = inputs
    cap = max(int(lens.max()), 1)
    kc, vc = (np.zeros((len(lens), cap) + c.shape[2:]) for c in (k, v))
    for b, n in enumerate(lens):
        kc[b, :n], vc[b, :n] = sequence_cache(k, b, n, table), sequence_cache(v, b, n, table)
    return q, kc, vc, lens, None


def decode_exactness(case: DecodeCase, inputs, ref) -> list[Exactness]:
    """Exactness records of one case (module docstring)."""
    q, k, v, lens, table = inputs
    out = []
    diffs = [[], []]
    for splits in (2, 3, 16):
        o, lse = reference.decode_attention(*inputs, causal=case.causal, num_splits=splits)
        diffs[0].append(error_stats(o, ref[0])["max_abs"])
        diffs[1].append(error_stats(lse, ref[1])["max_abs"])
    out += [Exactness(case, f"split-KV 2/3/16 merged vs one-shot {t}", max(d),
                      max(d) <= EXACT_TOL) for t, d in zip(("O", "LSE"), diffs, strict=True)]
    worst = 0.0
    for b, n in enumerate(lens.tolist()):
        if n == 0:
            continue
        o, lse = reference.attention(q[b].transpose(1, 0, 2),
                                     sequence_cache(k, b, n, table).transpose(1, 0, 2),
                                     sequence_cache(v, b, n, table).transpose(1, 0, 2),
                                     causal=case.causal)
        worst = max(worst, error_stats(o.transpose(1, 0, 2), ref[0][b])["max_abs"],
                    error_stats(lse, ref[1][b])["max_abs"])
    out.append(Exactness(case, "one-shot vs forward reference per sequence (O, LSE)", worst,
                         worst <= EXACT_TOL))
    if table is not None:
        o, lse = reference.decode_attention(*_contiguous(inputs), causal=case.causal,
                                            num_splits=3)
        p_o, p_lse = reference.decode_attention(*inputs, causal=case.causal, num_splits=3)
        same = np.array_equal(o, p_o) and np.array_equal(lse, p_lse)
        out.append(Exactness(case, "paged vs contiguous (bit for bit)",
                             error_stats(p_o, o)["max_abs"], same))
    return out


def decode_bytes(case: DecodeCase, itemsize: int) -> int:
    """Bytes a decode call must move: the K and V rows of every cached key read once
    (sum of lengths x Hkv x (d + dv)), q read and o written (B x Nq x H x d each), at
    ``itemsize`` bytes an element. Partials, LSE and the block table are not counted:
    GB/s from it is the useful traffic, as FlashDecoding reports."""
    kv = sum(case.lens) * case.Hkv * 2 * case.d
    return itemsize * (kv + 2 * case.B * case.Nq * case.H * case.d)


def handed_decode(prec: Precision, inputs) -> list:
    """Fresh torch copies of a case's inputs for one backend call: q, k_cache, v_cache in
    ``prec``, rounded by NumPy first (torch rounds float64 to fp16 / bf16 through fp32,
    twice: docs/decode.md), cache_seqlens and block_table (or None) as int32."""
    import torch

    q, k, v, lens, table = inputs
    return [*handed(prec, *(caller_inputs(prec, x) for x in (q, k, v))),
            *(None if x is None else torch.tensor(x, dtype=torch.int32) for x in (lens, table))]


def band_edge(case: DecodeCase, dtype: str) -> float | None:
    """The tolerance band's edge (:func:`flashbench.tolerance`, O max |err|) of the case:
    the largest over its sequences (a row of few keys errs more than one of many), or None
    where the shipped table does not reach (a sequence past its largest N)."""
    from flashbench.bands.table import tolerance

    try:
        return max(tolerance(dtype, n, dist=case.dist, causal=case.causal,
                             nq=min(case.Nq, n) if case.causal else None)
                   for n in set(case.lens) if n > 0)
    except ValueError:
        return None


def measure_decode(case: DecodeCase, dtypes: Sequence[str | Precision], kernels: Sequence[str],
                   seed: int = 0, say: Callable[[str], None] = lambda msg: None,
                   inputs=None, ref=None, bands: dict | None = None,
                   band_rule: bool = True) -> list:
    """Judge :data:`MODEL` and decode backends in each dtype (names or their Precisions,
    resolved once, here; module docstring) by both rules, the band rule's band the split
    model's (:mod:`flashbench.bands.decode`); ``band_rule`` False: ``inputs`` not drawn from
    the case (hand-made), the baseline rule alone. ``bands`` (a dict) receives {(kernel,
    dtype name): O max |err| vs the rounded inputs' float64 decode}."""
    from flashbench.backends.decode import get_decode_backend

    inputs = decode_inputs(case, seed) if inputs is None else inputs
    ref = reference.decode_attention(*inputs, causal=case.causal) if ref is None else ref
    records = []
    judged = DecodeBands(case, inputs, apply=band_rule)
    for prec in (get_precision(d) for d in dtypes):  # the door: names become Precisions
        dtype = prec.name  # what records and backends (their declared dtypes) speak
        std = numerics.standard_decode_model(*inputs, dtype=prec, causal=case.causal)
        if bands is not None:
            rounded = judged.reference(prec)[0]
        model = functools.cache(partial(numerics.split_decode_model, *inputs, dtype=prec,
                                        causal=case.causal, num_splits=MODEL_SPLITS))
        for name in kernels:
            if name == MODEL:
                say(f"  {MODEL} {dtype}")
                records.append(accuracy_record(case, name, prec, model(), std, ref,
                                               fallback=model, bands=judged))
                if bands is not None:
                    bands[(name, dtype)] = error_stats(model()[0], rounded)["max_abs"]
                continue
            backend = get_decode_backend(name)
            if dtype not in backend.dtypes:
                continue
            reason = backend.unavailable_for(case.d, dtype)
            if reason is None and backend.interpreted() and (
                    case.B * case.H * case.Nq * max(case.lens) > INTERPRETER_LIMIT):
                reason = INTERPRETER_TOO_SLOW
            if reason is not None:
                records.append(Unavailable(case, name, dtype, reason))
                continue
            say(f"  {name} {dtype}")
            # fresh copies per call: what a backend does to them reaches no other
            out, failed = attempt(case, name, dtype, backend, backend, *handed_decode(prec, inputs),
                                  causal=case.causal)
            if failed is not None:
                records.append(failed)
                continue
            rec = accuracy_record(case, name, prec, out, std, ref, fallback=model,
                                  own_lse=out.own_lse, peer=backend.peer, bands=judged)
            if not rec.passed and with_note("", backend, dtype):
                rec = replace(rec, note=INTERPRETER_NOTE)
            records.append(rec)
            if bands is not None:
                bands[(name, dtype)] = error_stats(out[0], rounded)["max_abs"]
    return records


def run_decode_check(cases: Sequence[DecodeCase], dtypes: Sequence[str | Precision],
                     backends: Sequence[str], seed: int = 0,
                     say: Callable[[str], None] = lambda msg: None,
                     time_limit: float | None = None) -> dict:
    """The decode check as a JSON-ready report: ``exactness`` and ``rows`` (one per kernel
    x dtype x case, with ``band``: the band's edge or None, and ``band_err``: O's error
    against the rounded inputs' decode, shown beside it, not judged), ``passed``.
    ``time_limit``: seconds a user's kernel may take per call, as in
    :func:`flashbench.measure.check.run_check`; its worker stops when the check ends."""
    from flashbench.backends import user

    precs = [get_precision(d) for d in dtypes]  # the door: names become Precisions, once
    with user.session(time_limit):
        return _run_decode_check(cases, precs, backends, seed, say)


def _run_decode_check(cases, precs: list[Precision], backends, seed, say) -> dict:
    report = {"seed": seed, "dtypes": [p.name for p in precs], "exact_tol": EXACT_TOL,
              "exactness": [], "rows": [], "model_splits": MODEL_SPLITS}
    for i, case in enumerate(cases, 1):
        say(f"[decode {i}/{len(cases)}] {case.label()}: fp64 reference")
        inputs = decode_inputs(case, seed)
        ref = reference.decode_attention(*inputs, causal=case.causal)
        report["exactness"] += [r.as_dict() for r in decode_exactness(case, inputs, ref)]
        bands: dict = {}
        for rec in measure_decode(case, precs, [MODEL, *backends], seed, say, inputs, ref,
                                  bands):
            row = rec.as_dict()
            if "band" in row:  # the band rule's verdicts; "band" stays the tolerance edge
                row["band_rule"] = row.pop("band")
            if "o" in row:
                row["band"] = band_edge(case, rec.dtype)
                row["band_err"] = bands.get((rec.kernel, rec.dtype))
            records_kernel = row.pop("kernel")
            report["rows"].append({"kernel": records_kernel, **row})
    report["passed"] = (all(r["passed"] for r in report["exactness"])
                        and all(r.get("passed", True) or r.get("peer") for r in report["rows"]))
    return report
