"""GPU check of the split-KV decode kernel: correctness first, then GB/s against the copy bandwidth.

    python -m tools.gpu.decode --quick [--out gpu-results]   # a few minutes on an H200
    python -m tools.gpu.decode --quick --plan [--compile]  # no GPU needed

(``tools/gpu/bench.py`` runs this after the forward and counts these compilations in its
plan.)

1. Correctness (flashbench.measure.decode.measure_decode): triton and torch-sdpa in bf16
   (the full run: and fp16) against the float64 decode on ragged, paged (16 to 256) and
   contiguous cases, GQA to 8 and MQA, Nq up to 16, one 32k sequence; the baseline rule
   against the same-dtype standard decode (the band rule left out: its bands, measured on
   the CPU, would spend the device's minutes; `check --decode` applies it). A failed triton
   check stops the timings (exit status 1).
2. Speed: bf16, d=128, H=32 over Hkv=8, pages of 64 scattered in the pool, causal, every
   sequence at the cache length; Nq = 1 (and 4: speculative); triton and torch-sdpa (the
   full run adds flex, torch-naive, and cache lengths 8k and 128k). Every timed call gets a
   cache from a pool and every output is checked
   (:func:`tools.gpu.checks.guarded_decode`: structure, checksums, 2 random sequences of
   each new cache against float64 by the baseline rule);
   a time counts only if all passed. Times: 20 runs after 3 warm-ups, L2 flushed, CUDA
   events, the whole device synchronised; median with quartiles. GB/s =
   flashbench.measure.decode.decode_bytes (K and V rows read, q read, o written) / median;
   "% copy" divides by this run's measured device copy bandwidth (timing.copy_bandwidth_gbs).
3. Targets (issue 28): triton >= 80% of the copy bandwidth at cache length >= 32k, and
   >= 1.0x the best torch peer. Writes <out>/<date>-<gpu>-decode.md and .json.
4. Absorbed MLA decode (:func:`run_mla`, docs/decode.md "Absorbed MLA decode"): GB/s and %
   of copy at cache length 8k; target >= 80% of copy.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

import torch

from flashbench.kernels import triton_decode  # noqa: E402
from flashbench.kernels.launch import planning  # noqa: E402
from flashbench.measure.decode import DecodeCase, decode_bytes  # noqa: E402
from tools.gpu.report import columns, json_stem

CHECK_DTYPES = ("fp16", "bf16")  # --quick checks bf16 only (fewer compilations)
TARGET_COPY_PCT = 80.0
TARGET_VS_PEER = 1.0


def check_cases() -> list[DecodeCase]:
    return [DecodeCase(4, 32, 8, 1, 128, (4096, 1000, 64, 1), 64),
            DecodeCase(2, 32, 8, 4, 128, (777, 32768), 16),
            DecodeCase(3, 16, 2, 16, 64, (300, 1200, 16), 256),
            DecodeCase(2, 8, 1, 8, 128, (5000, 3), 128),
            DecodeCase(2, 8, 8, 2, 64, (500, 3), None, causal=False)]


def timed_cases(quick: bool) -> list[DecodeCase]:
    lens = (32768,) if quick else (8192, 32768, 131072)
    batches = (1, 16, 64) if quick else (1, 4, 16, 64)
    cases = [DecodeCase(b, 32, 8, 1, 128, (n,) * b, 64) for n in lens for b in batches
             if b * n <= 64 * 32768]
    return cases + [DecodeCase(b, 32, 8, 4, 128, (32768,) * b, 64)
                    for b in ((1,) if quick else (1, 16))]


def backends_for(quick: bool) -> tuple[str, ...]:
    """--quick leaves flex out: it compiles per shape, tens of seconds each on a GPU."""
    return ("triton", "torch-sdpa") + (() if quick else ("flex", "torch-naive"))


def cache_inputs(case: DecodeCase, device, dtype=torch.bfloat16, seed: int = 0):
    """Random (q, k_cache, v_cache, cache_seqlens int32, block_table int32): pages of
    ``case.page_size`` in a random order of the pool (meta tensors for planning)."""
    page = case.page_size
    pages = [-(-n // page) for n in case.lens]
    total, width = sum(pages), max(pages)
    shapes = ((case.B, case.Nq, case.H, case.d), (total, page, case.Hkv, case.d),
              (total, page, case.Hkv, case.d))
    lens = torch.tensor(case.lens, dtype=torch.int32)
    if device == "meta":
        q, k, v = (torch.empty(s, device="meta", dtype=dtype) for s in shapes)
        return q, k, v, lens.to("meta"), torch.empty(case.B, width, dtype=torch.int32,
                                                     device="meta")
    g = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(s, device=device, dtype=dtype, generator=g) for s in shapes)
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed))
    table = torch.zeros(case.B, width, dtype=torch.int32)
    start = 0
    for b, n in enumerate(pages):
        table[b, :n] = order[start:start + n]
        start += n
    return q, k, v, lens.to(device), table.to(device)


MLA = dict(H=128, Hkv=1, d=576, dv=512, page=64)  # DeepSeek-V3's absorbed decode


def mla_cases(quick: bool) -> list[tuple[int, int]]:
    """(B, cache length) of the absorbed MLA timings: 8k (the full run: and 32k)."""
    return [(b, n) for n in ((8192,) if quick else (8192, 32768)) for b in (16, 64)]


def mla_inputs(B: int, n: int, device, seed: int = 0):
    """bf16 (q [B, 1, 128, 576], k_cache [pages, 64, 1, 576], cache_seqlens, block_table):
    every sequence at length n, pages in a random order of the pool (meta: planning)."""
    case = DecodeCase(B, MLA["H"], MLA["Hkv"], 1, MLA["d"], (n,) * B, MLA["page"])
    q, k, _, lens, table = cache_inputs(case, device, seed=seed)
    return q, k, lens, table


def mla_bytes(B: int, n: int, itemsize: int = 2) -> int:
    """Bytes the absorbed decode must move: each cached row's 576 columns read once (V is
    their first 512), q read, o (512 columns) written."""
    return itemsize * (B * n * MLA["Hkv"] * MLA["d"] + B * MLA["H"] * (MLA["d"] + MLA["dv"]))


def check_mla(o, q, k, lens, table, seq: int = 0) -> dict:
    """Sequence ``seq``'s O against float64 by the baseline rule (vs the standard decode)."""
    from flashbench.accuracy import baseline_rule, error_stats
    from flashbench.numerics.decode import standard_decode_model
    from flashbench.reference import decode_attention

    pages = table[seq, : -(-int(lens[seq]) // MLA["page"])].long()
    q0, k0 = (t.detach().cpu().double().numpy() for t in (q[seq:seq + 1], k[pages]))
    n_lens = lens[seq:seq + 1].cpu().numpy()
    local = torch.arange(len(pages), dtype=torch.int32)[None].numpy()
    ref = decode_attention(q0, k0, None, n_lens, local, causal=True, dv=MLA["dv"])[0]
    std = standard_decode_model(q0, k0, None, n_lens, local, dtype="bf16", causal=True,
                                dv=MLA["dv"])[0]
    err = error_stats(o[seq:seq + 1], ref)["max_abs"]
    verdict = baseline_rule(err, error_stats(std, ref)["max_abs"], "bf16")
    return {"o_max_abs": err, "ratio": verdict.ratio, "passed": verdict.passed}


def run_mla(quick: bool, copy_gbs: float, say) -> list[dict]:
    """The absorbed MLA decode timed (FlashMLA's form): bf16, one kv head of d = 576 shared
    by 128 query heads, V = the cache's first 512 columns (``v_cache=None, dv=512``), pages
    of 64, B = 16 and 64 at :func:`mla_cases`' lengths; timed by tools.gpu.checks.guarded_decode
    (a pool of 3 caches, every output checked: structure, checksums, 2 random sequences of
    each new cache against float64 by the baseline rule); GB/s = :func:`mla_bytes` / median;
    rows as :func:`run_timings`'."""
    from flashbench.measure.decode import DecodeCase
    from tools.gpu.checks import guarded_decode

    seed = int.from_bytes(os.urandom(8), "little") % 2**62  # this run's pools
    rows = []
    for B, n in mla_cases(quick):
        inputs = mla_inputs(B, n, "cuda")
        q, k, lens, table = inputs
        moved = mla_bytes(B, n)
        row = {"case": f"MLA {B}x128/1x1x576/512:{n}:p64", "backend": "triton", "B": B,
               "Nq": 1, "cache_len": n, "MB_moved": moved / 1e6}
        rows.append(row)
        try:
            o, _, used = triton_decode.decode_forward(q, k, None, lens, table, causal=True,
                                                      dv=MLA["dv"])
            row["splits"] = used.num_splits
            del inputs, q, k, o
            samples, row["check"] = guarded_decode(
                None, DecodeCase(B, MLA["H"], MLA["Hkv"], 1, MLA["d"], (n,) * B, MLA["page"]),
                seed, make=lambda s, B=B, n=n: mla_inputs(B, n, "cuda", seed=s % 2**31),
                call=lambda q, k, lens, table: triton_decode.triton_decode(
                    q, k, None, lens, table, causal=True, check=False, dv=MLA["dv"]),
                check=lambda o, x, seq: check_mla(o, *x, seq=seq))
            row["seed"] = seed
            if not row["check"]["passed"]:
                row["skipped"] = "timed outputs failed their checks: time not counted"
                continue
        except Exception as exc:  # report it, keep the other cases
            row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
            continue
        med = statistics.median(samples)
        q1, _, q3 = statistics.quantiles(samples, n=4)
        row.update(us=med * 1e6, us_q1=q1 * 1e6, us_q3=q3 * 1e6, gbs=moved / med * 1e-9)
        row["pct_copy"] = 100 * row["gbs"] / copy_gbs
        say(f"  {row['case']}: triton {row['gbs']:.0f} GB/s ({row['pct_copy']:.0f}% of copy)")
        torch.cuda.empty_cache()
    return rows


def check_dtypes(quick: bool) -> tuple[str, ...]:
    return ("bf16",) if quick else CHECK_DTYPES


def check_shapes(case: DecodeCase, spare_pages: int = 3) -> tuple:
    """The shapes of ``flashbench.measure.decode.decode_inputs(case)``: (q, k_cache, v_cache,
    cache_seqlens, block_table or None), as ``make_decode`` lays them out (its 3 spare pages),
    without drawing a value: the plan needs shapes only, and the draw of a 32k case is
    seconds of CPU."""
    B, page = case.B, case.page_size
    q = (B, case.Nq, case.H, case.d)
    if page is None:
        rows, table = (B, max(max(case.lens), 1)), None
    else:
        pages = [-(-n // page) for n in case.lens]
        rows, table = (sum(pages) + spare_pages, page), (B, max(max(pages), 1))
    return (q, (*rows, case.Hkv, case.d), (*rows, case.Hkv, case.dv), (B,), table)


def replay(quick: bool) -> None:
    """Every decode kernel launch of the run, on meta tensors (inside planning())."""
    from flashbench.kernels.validate import torch_dtype

    for case in check_cases():
        q, k, v, lens, table = check_shapes(case)
        for dtype in check_dtypes(quick):
            t = [torch.empty(x, device="meta", dtype=torch_dtype(dtype)) for x in (q, k, v)]
            triton_decode.triton_decode(*t, torch.empty(lens, dtype=torch.int32, device="meta"),
                                        None if table is None else torch.empty(
                                            table, dtype=torch.int32, device="meta"),
                                        causal=case.causal, check=False)
    for case in timed_cases(quick):
        triton_decode.triton_decode(*cache_inputs(case, "meta"), causal=True, check=False)
    for B, n in mla_cases(quick):
        q, k, lens, table = mla_inputs(B, n, "meta")
        triton_decode.triton_decode(q, k, None, lens, table, causal=True, check=False,
                                    dv=MLA["dv"])


def record_plan(quick: bool):
    with planning() as plan:
        replay(quick)
    return plan


def run_checks(quick: bool, say) -> list[dict]:
    from flashbench.measure.decode import measure_decode

    rows = []
    for case in check_cases():
        say(f"check {case.label()}")
        for rec in measure_decode(case, check_dtypes(quick), ["triton", "torch-sdpa"],
                                  band_rule=False):
            row = rec.as_dict()
            for key in ("o", "lse"):
                if isinstance(row.get(key), dict):
                    row[key] = row[key]["max_abs"]
            rows.append({k: v for k, v in row.items() if not isinstance(v, dict)})
    return rows


def check_sequence0(o, inputs, case: DecodeCase, seq: int = 0) -> dict:
    """O of sequence ``seq`` against float64, by the baseline rule (vs the standard decode)."""
    from flashbench.accuracy import baseline_rule, error_stats
    from flashbench.numerics.decode import standard_decode_model
    from flashbench.reference import decode_attention

    q, k, v, lens, table = inputs
    pages = table[seq, : -(-case.lens[seq] // case.page_size)].long()
    one = [q[seq:seq + 1], k[pages], v[pages]]
    np64 = [t.detach().cpu().double().numpy() for t in one]
    n_lens = lens[seq:seq + 1].cpu().numpy()
    local = torch.arange(len(pages), dtype=torch.int32)[None].numpy()
    ref = decode_attention(*np64, n_lens, local, causal=True)[0]
    std = standard_decode_model(*np64, n_lens, local, dtype="bf16", causal=True)[0]
    err = error_stats(o[seq:seq + 1], ref)["max_abs"]
    verdict = baseline_rule(err, error_stats(std, ref)["max_abs"], "bf16")
    return {"o_max_abs": err, "ratio": verdict.ratio, "passed": verdict.passed}


def run_timings(quick: bool, copy_gbs: float, say) -> list[dict]:
    from flashbench.backends.decode import get_decode_backend
    from tools.gpu.checks import guarded_decode

    rows = []
    seed = int.from_bytes(os.urandom(8), "little") % 2**62  # this run's pools
    for case in timed_cases(quick):
        inputs = cache_inputs(case, "cuda")
        moved = decode_bytes(case, 2)
        for name in backends_for(quick):
            row = {"case": case.label(), "backend": name, "B": case.B, "Nq": case.Nq,
                   "cache_len": case.lens[0], "MB_moved": moved / 1e6, "seed": seed}
            rows.append(row)
            try:
                b = get_decode_backend(name)
                if name == "triton":
                    _, _, used = triton_decode.decode_forward(*inputs, causal=True)
                    row["splits"] = used.num_splits
                samples, row["check"] = guarded_decode(b, case, seed)
                if not row["check"]["passed"]:
                    row["skipped"] = "timed outputs failed their checks: time not counted"
                    continue
            except Exception as exc:  # one backend's failure must not stop the others
                row["skipped"] = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
                continue
            med = statistics.median(samples)
            q1, _, q3 = statistics.quantiles(samples, n=4)
            row.update(us=med * 1e6, us_q1=q1 * 1e6, us_q3=q3 * 1e6, gbs=moved / med * 1e-9)
            row["pct_copy"] = 100 * row["gbs"] / copy_gbs
        got = {r["backend"]: r.get("gbs") for r in rows if r["case"] == case.label()}
        say(f"  {case.label()}: " + ", ".join(f"{k} {v:.0f}" if v else f"{k} -"
                                              for k, v in got.items()) + " GB/s")
        del inputs
        torch.cuda.empty_cache()
    return rows


def targets(rows: list[dict]) -> list[dict]:
    out = []
    for case in dict.fromkeys(r["case"] for r in rows):
        mine = next((r for r in rows if r["case"] == case and r["backend"] == "triton"), {})
        peers = [r["gbs"] for r in rows if r["case"] == case and r["backend"] != "triton"
                 and "gbs" in r]
        if "gbs" not in mine:
            out.append({"case": case, "met": False, "why": mine.get("skipped", "not timed")})
            continue
        vs = mine["gbs"] / max(peers) if peers else None
        long = mine["cache_len"] >= 32768
        met = (not long or mine["pct_copy"] >= TARGET_COPY_PCT) and (vs is None or
                                                                    vs >= TARGET_VS_PEER)
        out.append({"case": case, "pct_copy": mine["pct_copy"], "vs_best_peer": vs,
                    "met": met})
    return out


def write_results(out_dir: str, record: dict) -> pathlib.Path:
    from tabulate import tabulate

    gpu = record["gpu_before"]["gpu"]
    stem = json_stem(out_dir, record, "-decode")
    speed = columns(record["speed"], ("case", "backend", "splits", "us", "us_q1", "us_q3",
                                      "gbs", "pct_copy", "skipped"))
    md = [f"# Triton split-KV decode on {gpu}, {record['date']}", "",
          f"Copy bandwidth measured in this run: {record['copy_gbs']:.0f} GB/s (device-to-"
          "device copy of 2 GiB, read + write counted, median device time). Compilations "
          f"planned {record['compiles_planned']}. Wall time {record['wall_s']:.0f} s.", "",
          "## Correctness vs the float64 decode (max abs error; ratio = kernel / same-dtype "
          "standard decode)", "", tabulate(record["checks"], headers="keys", tablefmt="github",
                                           floatfmt=".2e"), "",
          "## Speed (us: median of 20 device-timed runs, L2 flushed; GB/s: K, V read, q read, "
          "o written / median; pct_copy: of the measured copy bandwidth)", "",
          tabulate(speed, headers="keys", tablefmt="github", floatfmt=".4g"), "",
          f"## Targets (>= {TARGET_COPY_PCT:g}% of copy at cache length >= 32k; >= "
          f"{TARGET_VS_PEER:g}x the best torch peer)", "",
          tabulate(record["targets"], headers="keys", tablefmt="github", floatfmt=".3g")]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    return stem


def run(quick: bool, out: str, say) -> int:
    """The GPU run (module docstring); 1 when a triton check failed."""
    from flashbench.measure.timing import copy_bandwidth_gbs, gpu_state

    start = time.time()
    checks = run_checks(quick, say)
    bad = [r for r in checks if r.get("kernel") == "triton" and r.get("passed") is False]
    copy_gbs = copy_bandwidth_gbs()
    say(f"device-to-device copy: {copy_gbs:.0f} GB/s")
    speed = [] if bad else run_timings(quick, copy_gbs, say) + run_mla(quick, copy_gbs, say)
    record = {"date": time.strftime("%Y-%m-%d"), "quick": quick, "gpu_before": gpu_state(),
              "copy_gbs": copy_gbs, "checks": checks, "speed": speed,
              "targets": targets(speed), "compiles_planned": len(record_plan(quick)),
              "wall_s": time.time() - start}
    stem = write_results(out, record)
    say(stem.with_suffix(".md").read_text().split("## Speed")[-1])
    return 1 if bad else 0


def show_plan(plan, compile_here: bool, report) -> None:
    """Print ``plan``'s compilations and its total; with ``compile_here``, compile each for sm_90
    here first (Triton's ptxas) and ``report`` the compiled list."""
    lines = plan.lines()
    print("\n".join(lines[:-1]))
    if compile_here:
        from flashbench.kernels.offline import compile_plan

        report(compile_plan(plan))
    print(lines[-1])


def _print_each(done) -> None:
    for r in done:
        print(f"  {r.line}: {r.seconds:.1f} s, shared {r.shared_bytes}, registers "
              f"{r.registers}, spills {r.spill_bytes}" + (f", ERROR {r.error}"
                                                           if r.error else ""))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--plan", action="store_true", help="print the decode compilations")
    p.add_argument("--compile", action="store_true", help="with --plan: compile for sm_90 here")
    p.add_argument("--out", default="gpu-results")
    args = p.parse_args(argv)
    if args.plan:
        show_plan(record_plan(args.quick), args.compile, _print_each)
        return 0
    if not torch.cuda.is_available():
        print("gpu_decode: no CUDA GPU visible to torch (--plan works anywhere)",
              file=sys.stderr)
        return 2
    return run(args.quick, args.out, lambda msg: print(msg, flush=True))


if __name__ == "__main__":
    sys.exit(main())
