"""Decode cases of ``flashbench check --decode``, as records (rendered by
:mod:`flashbench.cli.decode`).

- :class:`DecodeCase`: batch, H/Hkv, Nq, d[/dv], ragged cache lengths, page size (None:
  contiguous), the absorbed MLA form (V is the cache's first dv columns), causal,
  distribution; text form ``BxH[/Hkv]xNqxd[/dv]:L1,L2,...[:pP][:mla]``.
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
from flashbench.accuracy.metrics import to_numpy
from flashbench.bands.decode import DECODE_SPLITS, decode_case_inputs
from flashbench.inputs.precision import Precision, get_precision
from flashbench.inputs.validation import head_group
from flashbench.measure.bandjudge import DecodeBands
from flashbench.measure.diagnose import diagnose
from flashbench.measure.records import (
    EXACT_TOL,
    INTERPRETER_LIMIT,
    INTERPRETER_NOTE,
    INTERPRETER_TOO_SLOW,
    Exactness,
    Unavailable,
    accuracy_record,
    attempt,
    exact,
    not_taken,
    with_note,
)
from flashbench.measure.seqdiagnose import decode_candidates
from flashbench.reference.decode import sequence_cache

__all__ = ["DecodeCase", "default_decode_cases", "decode_exactness", "measure_decode",
           "band_edge", "MODEL", "MODEL_SPLITS", "decode_inputs", "run_decode_check",
           "decode_bytes", "handed_decode", "absorbed_inputs", "case_reference", "decode_passed"]

MODEL = "split_model"  # the kernel name of the precision model's rows
MODEL_SPLITS = DECODE_SPLITS  # the split model's splits, in its row and its bands
_SPEC = re.compile(r"^(\d+)x(\d+)(?:/(\d+))?x(\d+)x(\d+)(?:/(\d+))?:(\d+(?:,\d+)*)"
                   r"(?::p(\d+))?(:mla)?(?::p(\d+))?$")  # :mla:pP as :pP:mla (a probe)
_FORM = "BxH[/Hkv]xNqxd[/dv]:L1,L2,...[:pPAGE][:mla]"


@dataclass(frozen=True)
class DecodeCase:
    """One decode problem (module docstring); ``lens`` has one length per sequence; ``dv``
    None means d; ``absorbed``: DeepSeek's MLA decode form, V = k_cache[..., :dv]."""

    B: int
    H: int
    Hkv: int
    Nq: int
    d: int
    lens: tuple[int, ...]
    page_size: int | None = None
    causal: bool = True
    dist: str = "normal"
    dv: int | None = None
    absorbed: bool = False

    def __post_init__(self):
        if self.dv is None:
            object.__setattr__(self, "dv", self.d)
        for name in ("B", "H", "Hkv", "Nq", "d", "dv", "page_size"):
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
        if not isinstance(self.absorbed, bool):
            raise ValueError(f"DecodeCase.absorbed must be a bool, got {self.absorbed!r}")
        if self.absorbed and self.dv >= self.d:
            raise ValueError(f"decode case {self.spec()}: the absorbed MLA form reads V as the "
                             f"cache's first dv columns, so it needs dv < d (d/dv, e.g. "
                             f"576/512), got d={self.d}, dv={self.dv}")

    def spec(self) -> str:
        page = "" if self.page_size is None else f":p{self.page_size}"
        dims = f"{self.d}" if self.dv == self.d else f"{self.d}/{self.dv}"
        return (f"{self.B}x{self.H}/{self.Hkv}x{self.Nq}x{dims}:"
                f"{','.join(map(str, self.lens))}{page}{':mla' if self.absorbed else ''}")

    def label(self) -> str:
        return f"{self.spec()} {self.dist}{' causal' if self.causal else ''}"

    @classmethod
    def parse(cls, text: str, causal: bool = True, dist: str = "normal") -> DecodeCase:
        """``BxH[/Hkv]xNqxd[/dv]:L1,L2,...[:pP][:mla]`` (``4x32/8x1x128:4096,100,7,1:p64``;
        DeepSeek's absorbed decode: ``1x16/1x1x576/512:256:p64:mla``)."""
        m = _SPEC.match(text.strip()) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"decode case must be {_FORM} (one cache length per sequence; "
                             f":mla the absorbed MLA form, V = K's first dv columns), got "
                             f"{text!r}")
        if m[8] is not None and m[10] is not None:
            raise ValueError(f"decode case {text.strip()!r}: a page size given twice")
        page = m[8] if m[10] is None else m[10]
        b, h, hkv, nq, d, dv = (int(x) if x else None for x in m.groups()[:6])
        if m[9] and dv is None:
            raise ValueError(f"decode case {text.strip()!r}: the absorbed MLA form (:mla) needs "
                             f"d/dv with dv < d (V is K's first dv columns), e.g. "
                             f"1x16/1x1x576/512:256:p64:mla")
        try:
            return cls(b, h, h if hkv is None else hkv, nq, d,
                       tuple(int(x) for x in m[7].split(",")),
                       None if page is None else int(page), causal, dist, dv, bool(m[9]))
        except ValueError as exc:  # "DecodeCase.page_size ...": the spec's words (a probe)
            said = str(exc)
            if said.startswith("DecodeCase."):
                said = f"decode case {text.strip()!r}: " + said.replace(
                    "DecodeCase.page_size", ":pP (the page size)").replace("DecodeCase.", "")
            raise ValueError(said) from None


def default_decode_cases() -> list[DecodeCase]:
    """Small enough for the interpreted kernel on a CPU: one token and speculative Nq,
    GQA to 8 and MQA, pages of 16 to 256 and a contiguous cache, ragged lengths, and a
    paged cache without the causal mask (flash_attn_with_kvcache's default), whose last
    pages end mid-page: there only the lengths hide the keys past them (a red team,
    2026-12-06: a kernel that read whole last pages PASSed the four causal-or-contiguous
    cases)."""
    return [DecodeCase(4, 8, 2, 1, 64, (1000, 517, 64, 1), 64),
            DecodeCase(2, 8, 1, 4, 64, (777, 2048), 16),
            DecodeCase(3, 16, 2, 16, 128, (300, 1200, 16), 256),
            DecodeCase(2, 4, 4, 2, 64, (500, 3), None, causal=False),
            DecodeCase(2, 4, 2, 1, 64, (37, 21), 16, causal=False)]


def decode_inputs(case: DecodeCase, seed: int = 0):
    """float64 ``(q, k_cache, v_cache, cache_seqlens, block_table)`` of a case (absorbed:
    v_cache a view of k_cache's first dv columns; :func:`decode_case_inputs`)."""
    return decode_case_inputs(case, seed)


def absorbed_inputs(inputs) -> bool:
    """True when ``inputs``' v_cache is a view of k_cache's first columns (the absorbed
    MLA form, as :func:`decode_inputs` draws it)."""
    _, k, v, _, _ = inputs
    return (v is not None and v.shape[:-1] == k.shape[:-1] and v.shape[-1] < k.shape[-1]
            and np.shares_memory(v, k))


def case_reference(case: DecodeCase, inputs, num_splits: int = 1):
    """The float64 decode of a case's inputs; the absorbed form through the reference's own
    ``v_cache=None, dv=`` (not the view)."""
    q, k, v, lens, table = inputs
    return reference.decode_attention(q, k, None if case.absorbed else v, lens, table,
                                      causal=case.causal, num_splits=num_splits, dv=case.dv)


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
        o, lse = case_reference(case, inputs, num_splits=splits)
        diffs[0].append(error_stats(o, ref[0])["max_abs"])
        diffs[1].append(error_stats(lse, ref[1])["max_abs"])
    out += [exact(case, f"split-KV 2/3/16 merged vs one-shot {t}", max(d), want)
            for t, d, want in zip(("O", "LSE"), diffs, ref, strict=True)]
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
    out.append(exact(case, "one-shot vs forward reference per sequence (O, LSE)", worst,
                     *ref[:2]))
    if table is not None:
        o, lse = reference.decode_attention(*_contiguous(inputs), causal=case.causal,
                                            num_splits=3)
        p_o, p_lse = reference.decode_attention(*inputs, causal=case.causal, num_splits=3)
        same = np.array_equal(o, p_o) and np.array_equal(lse, p_lse)
        out.append(Exactness(case, "paged vs contiguous (bit for bit)",
                             error_stats(p_o, o)["max_abs"], same))
    if case.absorbed:  # the reference's v=None form vs V copied out of K: the same sums
        o, lse = reference.decode_attention(q, k, np.array(v), lens, table, causal=case.causal)
        same = np.array_equal(o, ref[0]) and np.array_equal(lse, ref[1])
        out.append(Exactness(case, "absorbed (v=None, dv) vs V = K[..., :dv] copied (bit for "
                             "bit)", error_stats(o, ref[0])["max_abs"], same))
    return out


def decode_bytes(case: DecodeCase, itemsize: int) -> int:
    """Bytes a decode call must move: the K and V rows of every cached key read once
    (sum of lengths x Hkv x (d + dv); absorbed: x d, V being K's first dv columns), q read
    (B x Nq x H x d) and o written (B x Nq x H x dv), at ``itemsize`` bytes an element.
    Partials, LSE and the block table are not counted: GB/s from it is the useful traffic,
    as FlashDecoding reports."""
    kv = sum(case.lens) * case.Hkv * (case.d if case.absorbed else case.d + case.dv)
    return itemsize * (kv + case.B * case.Nq * case.H * (case.d + case.dv))


def handed_decode(prec: Precision, inputs) -> list:
    """Fresh torch copies of a case's inputs for one backend call: q, k_cache, v_cache in
    ``prec``, rounded by NumPy first, cache_seqlens and block_table (or None) as int32
    (:func:`flashbench.timed.decode.hand_decode`, the one place, speed's pools too)."""
    from flashbench.timed.decode import hand_decode

    return hand_decode(prec, inputs, absorbed_inputs(inputs))


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
    ref = case_reference(case, inputs) if ref is None else ref
    records = []
    judged = DecodeBands(case, inputs, apply=band_rule)
    for prec in (get_precision(d) for d in dtypes):  # the door: names become Precisions
        dtype = prec.name  # what records and backends (their declared dtypes) speak
        std = numerics.standard_decode_model(*inputs, dtype=prec, causal=case.causal,
                                             dv=case.dv)
        if bands is not None:
            rounded = judged.reference(prec)[0]
        model = functools.cache(partial(numerics.split_decode_model, *inputs, dtype=prec,
                                        causal=case.causal, num_splits=MODEL_SPLITS,
                                        dv=case.dv))
        for name in kernels:
            if name == MODEL:
                say(f"  {MODEL} {dtype}")
                records.append(accuracy_record(case, name, prec, model(), std, ref,
                                               fallback=model, bands=judged))
                if bands is not None:
                    bands[(name, dtype)] = error_stats(model()[0], rounded)["max_abs"]
                continue
            backend = get_decode_backend(name)
            if dtype not in backend.dtypes:  # not applicable: a user's kernel says so
                records += not_taken(case, name, dtype, backend)
                continue
            reason = backend.case_unavailable(case, dtype)
            if reason is None and backend.interpreted() and (
                    case.B * case.H * case.Nq * max(case.lens) > INTERPRETER_LIMIT):
                reason = INTERPRETER_TOO_SLOW
            if reason is not None:
                records.append(Unavailable(case, name, dtype, reason, backend.peer))
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
            elif not rec.passed and not rec.peer:  # tried: a plausible wrong semantics
                rec = replace(rec, worst_at=worst_decode_sequence(out[0], ref[0], std[0],
                                                                  case.lens),
                              diagnosis=diagnose(
                    decode_candidates(inputs, case.causal, case.dv, case.absorbed), out, ref,
                    rec.o_standard["max_abs"],
                    rec.lse_standard["max_abs"] if rec.lse is not None else None))
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
    :func:`flashbench.measure.run.run_check`; its worker stops when the check ends."""
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
        ref = case_reference(case, inputs)
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
    report["passed"] = decode_passed(report)
    return report


def worst_decode_sequence(o, ref_o, std_o, lens) -> str | None:
    """Where a decode output's largest |error| lies, beside the other sequences' largest;
    and where that sequence alone is off (its error over the same-dtype standard's there,
    :data:`LOCAL` x every other sequence's), a wrong result there: a wrong page or length
    hits some sequences, a precision loss all (a probe's kernel reading a wrong page of
    sequence 0 read "likely the O accumulator" at 40x the standard's error, 2026-12-07).
    None for one sequence."""
    def per_sequence(x):
        return np.abs(to_numpy(x) - ref_o).reshape(len(lens), -1).max(axis=1)

    worst, std = per_sequence(o), per_sequence(std_o)
    if len(lens) < 2 or not np.isfinite(worst).all():
        return None
    s = int(np.argmax(worst))
    others = float(np.delete(worst, s).max())
    rel = worst / np.maximum(std, 1e-300)
    # a loss that grows with length is worst in the longest too (the one longest)
    longest = lens[s] == max(lens) and list(lens).count(lens[s]) == 1
    held = [i for i in range(len(lens)) if i != s and lens[i] > 0]  # an empty one: no error
    alone = (f": {rel[s]:.3g}x the same-dtype standard's error there, over {LOCAL:g}x any "
             "other sequence's: a wrong result in that sequence (its pages, its length)"
             + (", or a loss growing with length far faster than the standard's (the "
                "longest sequence)" if longest else ", not a precision loss, which spreads "
                "over every sequence")
             if held and rel[s] > LOCAL * rel[held].max() else "")
    return (f"worst in sequence {s + 1} of {len(lens)} (index {s}, {lens[s]} cached keys): "
            f"max |err| {worst[s]:.3g}; the other sequences' largest {others:.3g}{alone}")


LOCAL = 10.0  # one sequence's max error this many times the others': a wrong result there


def decode_passed(report: dict) -> bool:
    """PASS iff the exactness and every non-peer row pass (skips pass)."""
    return (all(r["passed"] for r in report["exactness"])
            and all(r.get("passed", True) or r.get("peer") for r in report["rows"]))
