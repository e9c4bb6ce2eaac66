"""gpu_bench's correctness checks: triton, triton-fp8 and the SDPA peers against the float64
reference by the baseline rule, and the sub-problem checks a timed output must pass before
its time counts (check_slice, check_grads). docs/gpu.md, "The GPU script"."""

from __future__ import annotations

import torch

from flashbench.inputs import Shape
from flashbench.kernels import triton_forward as triton_fwd
from flashbench.kernels import triton_fp8
from flashbench.measure.decode import DecodeCase
from flashbench.measure.records import Case
from tools.gpu import headdims as gpu_headdims
from tools.gpu import variants as gpu_variants

CHECK_DTYPES = ("fp32", "fp16", "bf16")
CHECK_PEERS = ("sdpa-flash", "sdpa-cudnn")
FP8_MODEL_AGREEMENT = 0.10  # |triton-fp8 O RMSE / fp8 flash model's - 1| at most this
SLICE_ROWS = 256  # query rows of the timed-output check


def check_cases(quick: bool) -> list[Case]:
    cases = [Case(Shape(1, 2, 1024, 1024, 64)), Case(Shape(1, 2, 1024, 1024, 64), causal=True),
             Case(Shape(2, 2, 777, 1500, 128), causal=True), Case(Shape(1, 4, 1500, 600, 128)),
             Case(Shape(1, 8, 1000, 1000, 128, Hkv=2), causal=True)]
    if not quick:
        cases += [Case(Shape(1, 2, 129, 129, 16), causal=True), Case(Shape(1, 2, 333, 400, 32)),
                  Case(Shape(1, 2, 1024, 1024, 256), causal=True),
                  Case(Shape(1, 8, 2048, 2048, 64), "outliers")]
    return cases


def fp8_check_cases(quick: bool) -> list[Case]:
    return [c for c in check_cases(quick) if c.shape.d in triton_fp8.HEAD_DIMS]


def run_checks(quick: bool, say) -> list[dict]:
    from flashbench.measure.forward import measure_accuracy

    rows = []
    with triton_fwd.default_config("fixed"):
        for case in check_cases(quick):
            say(f"check {case.label()}")
            for rec in measure_accuracy(case, CHECK_DTYPES, ("triton", *CHECK_PEERS)):
                row = rec.as_dict()
                if row.get("kernel") == "triton" and row.get("dtype") == "fp32" and "o" in row:
                    row["passed"] = row["passed"] and row["o"]["max_abs"] <= 1e-5
                rows.append(row)
        for case in fp8_check_cases(quick):
            say(f"check fp8 {case.label()}")
            rows += fp8_check_rows(case)
    return rows + gpu_variants.check_rows(say) + gpu_headdims.check_rows(say)


def fp8_check_rows(case: Case) -> list[dict]:
    """triton-fp8 and the fp8 flash model on the kernel's fixed tiles (the model's
    block_q = block = BLOCK_N; equal to BLOCK_M for the fixed fp8 configs of d <= 128):
    the baseline rule, and the kernel's O RMSE within FP8_MODEL_AGREEMENT of the model's."""
    from flashbench.measure.forward import measure_accuracy

    bm, bn = triton_fp8.tiles(case.shape.d, "cuda" if torch.cuda.is_available() else "cpu")
    recs = [r.as_dict() for r in measure_accuracy(case, ("fp8",), ("flash_model", "triton-fp8"),
                                                  block=bn)]
    model = next((r for r in recs if r.get("kernel") == "flash_model" and "o" in r), None)
    for r in recs:
        if r.get("kernel") == "triton-fp8" and "o" in r and model is not None:
            r["vs_fp8_model"] = r["o"]["rmse"] / model["o"]["rmse"]
            r["model_blocks"] = f"{bn}x{bn} (kernel tiles {bm}x{bn})"
            r["passed"] = r["passed"] and abs(r["vs_fp8_model"] - 1) <= FP8_MODEL_AGREEMENT
    return recs


def check_slice(o, q, k, v, causal: bool, dtype: str) -> dict:
    """The timed output against the float64 reference on a sub-problem: batch 0, heads 0
    and H-1 (their kv heads under GQA), the last SLICE_ROWS query rows, all keys."""
    from flashbench import numerics, reference
    from flashbench.accuracy import baseline_rule, error_stats

    H, group = q.shape[1], q.shape[1] // k.shape[1]
    heads = sorted({0, H - 1})
    rows = slice(max(0, q.shape[2] - SLICE_ROWS), q.shape[2])

    def np64(t):
        return t.detach().float().cpu().double().numpy()

    qs = np64(q[0, heads, rows])
    ks, vs = (np64(t[0, [h // group for h in heads]]) for t in (k, v))
    ref = reference.attention(qs, ks, vs, causal=causal)
    std = numerics.standard_model(qs, ks, vs, dtype, causal=causal)
    err, err_std = error_stats(o[0, heads, rows], ref[0]), error_stats(std[0], ref[0])
    verdict = baseline_rule(err["max_abs"], err_std["max_abs"], dtype)
    return {"o_max_abs": err["max_abs"], "standard_max_abs": err_std["max_abs"],
            "ratio": verdict.ratio, "passed": bool(verdict.passed)}


def check_grads(grads, q, k, v, do, causal: bool, dtype: str, cache: dict,
                window: tuple[int, int] = (-1, -1)) -> dict:
    """Timed gradients against the float64 reference on a sub-problem: batch 0, kv head 0
    and its query heads, all rows (dk, dv need every query), by the gradient rule (3x the
    same-dtype standard backward plus FlashAttention's floor)."""
    from flashbench import numerics, reference
    from flashbench.accuracy import judge_gradient

    group = q.shape[1] // k.shape[1]

    def np64(t):
        return t.detach().float().cpu().double().numpy()

    if "ref" not in cache:  # the same inputs for every backend of this case
        sub = [np64(q[0, :group]), np64(k[0, :1]), np64(v[0, :1]), np64(do[0, :group])]
        cache["ref"] = reference.attention_grad(*sub, causal=causal, window=window)
        cache["std"] = numerics.standard_model_grad(*sub, dtype, causal=causal, window=window)
    got = (grads[0][0, :group], grads[1][0, :1], grads[2][0, :1])
    out = {"passed": True}
    for name, g, r, s in zip(("dq", "dk", "dv"), got, cache["ref"], cache["std"], strict=True):
        j = judge_gradient(g, s, r, dtype)
        out[f"{name}_max_abs"] = j["kernel"]["max_abs"]
        out[f"{name}_ratio"] = j["verdict"].ratio
        out["passed"] = out["passed"] and bool(j["verdict"].passed)
    return out


# ------------------------------------------------- timed calls on fresh inputs (issue 35)

def guarded_forward(backend, shape, dtype: str, causal: bool, roof, seed: int,
                    device: str = "cuda", samples: int = 20, warmup: int = 3) -> dict:
    """A forward row timed as ``flashbench speed`` times it (measure.speedrun.time_backend):
    every call on inputs from a pool (per-run ``seed``), the whole device synchronised before
    the end event, the L2 flushed, every output judged outside the clock (structure, checksum
    against the first call on the same contents, 8 rows against the float64 reference), a
    time under half the roofline floor (``roof``) a failure. The row in gpu_bench's fields."""
    from flashbench.measure.speed import SpeedCase
    from flashbench.measure.speedrun import time_backend

    r = time_backend(SpeedCase(shape, dtype, causal), backend, roof, seed, samples, warmup,
                     device)
    row = {"clock": r.clock, "check": {"passed": r.status == "PASS", "failures": r.failures,
                                       "checked": r.checked}}
    if r.status != "PASS" or not r.samples_s:
        row["skipped"] = r.reason or ("timed outputs failed their checks: time not counted ("
                                      + "; ".join(f"{k}: {v}" for k, v in r.failures.items())
                                      + ")")
        return row
    row["samples_s"] = r.samples_s
    return row


def guarded_backward(backend, shape, dtype: str, causal: bool, seed: int,
                     device: str = "cuda", samples: int = 20, warmup: int = 3,
                     grad_call=None, window: tuple[int, int] = (-1, -1)):
    """``(samples_s, check)`` of ``torch.autograd.grad(o, (q, k, v), dO)`` (or, for a kernel's
    own backward, ``grad_call(q, k, v) -> (o, call)`` with ``call(dO) -> (dq, dk, dv)``; then
    ``backend`` is unused): the forward runs
    once before the clock, each timed call gets a dO from a pool (flashbench.timed.Pool: per-run
    seed, slots refilled in place between rounds; dq, dk, dv all depend on dO), timed by
    flashbench.timed.timed_calls (device-wide synchronisation before the end event, L2
    flushed). Every call's gradients are checked outside the clock: plain dense tensors that
    alias nothing, the same checksum as the first call on the same dO, no other dO's
    checksum (stale), and each dO's first gradients by :func:`check_grads` (``window``: the
    sliding window the kernel applies)."""
    from flashbench.measure.timing import NotDifferentiable
    from flashbench.timed import Pool, structural, timed_calls
    from flashbench.timed.attention import attention_maker, pool_size
    from flashbench.timed.guard import STALE, WRONG, l2_flusher

    if grad_call is not None:
        q, k, v = (t.to(device) for t in attention_maker(shape, dtype, "cpu")(seed))
        leaves = (q, k, v)
        with torch.no_grad():
            o, call = grad_call(q, k, v)
    else:
        q, k, v = backend.prepare(*attention_maker(shape, dtype, "cpu")(seed), device=device)
        leaves = tuple(t.detach().requires_grad_(True) for t in (q, k, v))
        o = backend.timed_fn(*leaves, causal=causal)
        o = o[0] if isinstance(o, tuple) else o
        if o.grad_fn is None:
            raise NotDifferentiable(f"{backend.name} is not differentiable: no backward to time")

        def call(do):
            return torch.autograd.grad(o, leaves, do, retain_graph=True)

    def make(s):
        g = torch.Generator().manual_seed(int(s))
        return (torch.randn(tuple(o.shape), generator=g).to(o.dtype).to(device),)

    pool = Pool(make, pool_size(shape, dtype, samples), seed)
    batch = timed_calls(call, pool, samples, warmup, device=device, flush=l2_flusher(device))
    faults, first = dict(batch.faults), {}
    for j, (grads, content, slot) in enumerate(zip(batch.outputs, batch.seeds, batch.slots,
                                                   strict=True)):
        bad = structural(grads, (*leaves, *pool.slots[slot]), batch.outputs[:j])
        if bad is not None:
            faults.setdefault(*bad)
            continue
        sums = [(float(g.double().sum()), float(g.double().abs().sum())) for g in grads]
        tol = [8 * torch.finfo(g.dtype).eps * max(a, 1e-30) for g, (_, a) in zip(grads, sums,
                                                                                strict=True)]

        def same(x, y, tol=tol):
            return all(abs(p[0] - r[0]) <= t and abs(p[1] - r[1]) <= t
                       for p, r, t in zip(x, y, tol, strict=True))

        if content in first:
            if not same(sums, first[content]):
                faults.setdefault(WRONG, f"call {j}: its gradients' checksum differs from the "
                                         "first call on the same dO")
            continue
        if any(sums == other for other in first.values()):  # bit for bit: a tolerance of
            # 8 eps x |sum| would call any two bf16 gradients of one shape the same
            faults.setdefault(STALE, f"call {j}: returned the gradients of another dO")
        first[content] = sums
        res = check_grads(grads, q, k, v, make(content)[0], causal, dtype, {}, window)
        if not res["passed"]:
            faults.setdefault(WRONG, f"call {j}: gradients off the float64 reference "
                                     f"(dq/dk/dv ratios {res['dq_ratio']:.3g}/"
                                     f"{res['dk_ratio']:.3g}/{res['dv_ratio']:.3g})")
    check = {"passed": not faults, "failures": faults, "checked": len(batch.outputs),
             "contents": len(first)}
    return batch.samples_s, check


CHECK_SEQS = 2  # sequences of each new input content checked against float64 (random)


def guarded_decode(b, case: DecodeCase, seed: int, device: str = "cuda", samples: int = 20,
                   warmup: int = 3, make=None, call=None, check=None):
    """``(samples_s, check)``: ``b.timed_fn`` timed by flashbench.timed.timed_calls on a pool
    of 3 caches (per-run ``seed``, refilled in place between rounds; the whole device
    synchronised before the end event, L2 flushed), every call's output checked outside the
    clock: a plain dense tensor aliasing no input, the same checksum as the first call on the
    same contents, not another content's (stale), and for each new content
    :data:`CHECK_SEQS` random sequences (not only sequence 0) by ``gpu_decode.check_sequence0``.
    ``make(seed)``, ``call(*inputs)`` and ``check(o_cpu, inputs, seq) -> {"passed", "ratio"}``
    replace the backend's (the absorbed MLA decode, with ``b`` None)."""
    import numpy as np

    from flashbench.timed import Pool, structural, timed_calls
    from flashbench.timed.guard import STALE, WRONG, l2_flusher
    from tools.gpu.decode import cache_inputs, check_sequence0

    make = make or (lambda s: cache_inputs(case, device, seed=s % 2**31))
    call = call or (lambda *x: b.timed_fn(*x, causal=True))
    check = check or (lambda o, inputs, seq: check_sequence0(o, inputs, case, seq))
    pool = Pool(make, 3, seed)
    batch = timed_calls(call, pool, samples, warmup, device=device, flush=l2_flusher(device))
    rng = np.random.default_rng(seed)
    faults, first, checked = dict(batch.faults), {}, 0
    for j, (out, content, slot) in enumerate(zip(batch.outputs, batch.seeds, batch.slots,
                                                 strict=True)):
        o = out[0] if isinstance(out, tuple | list) else out
        bad = structural(o, pool.slots[slot], [x[0] if isinstance(x, tuple | list) else x
                                               for x in batch.outputs[:j]])
        if bad is not None:
            faults.setdefault(*bad)
            continue
        x = o.detach().double()
        sums = (float(x.sum()), float(x.abs().sum()))
        tol = 8 * torch.finfo(o.dtype).eps * max(sums[1], 1e-30)
        if content in first:
            t = first[content]
            if abs(t[0] - sums[0]) > tol or abs(t[1] - sums[1]) > tol:
                faults.setdefault(WRONG, f"call {j}: its checksum differs from the first call "
                                         "on the same cache")
            continue
        if sums in first.values():  # bit for bit (a tolerance would match any bf16 output)
            faults.setdefault(STALE, f"call {j}: returned the output of another cache")
        first[content] = sums
        inputs = make(content)  # the same generator
        for seq in rng.choice(case.B, min(case.B, CHECK_SEQS), replace=False):
            checked += 1
            res = check(o.cpu(), inputs, int(seq))
            if not res["passed"]:
                faults.setdefault(WRONG, f"call {j}: sequence {int(seq)} off the float64 "
                                         f"reference ({res['ratio']:.3g}x the baseline rule)")
    return batch.samples_s, {"passed": not faults, "failures": faults,
                             "calls": len(batch.outputs), "sequences_checked": checked}
