"""Study: how often does speed's gradient judge fail an honest backward? (issue 35)

Question: ``flashbench speed --pass bwd`` judges each content's timed (dq, dk, dv) on 8
random rows and the first and last by the gradient rule (3x the same-dtype standard
backward's max error + floor, the flash model's as the fallback yardstick:
flashbench.measure.speedgrad.GradJudge), the standard's error the largest over the run's
contents (GradJudge.finish). For honest backwards on CPU (torch's sdpa, whose fp32 flash
kernel takes an approximate exp, and sdpa's math form), on CONTENTS random contents drawn
as a speed run draws them: how many runs of RUN contents fail, each content judged against
its own standard (the rule before 2026-12-07) and by the run's extremes?
Answer: docs/speed.md ("Passes").

Usage: python -m studies.grad_judge_rate [--contents 20000] [--threads 1] [--run 10 200]
       [--shape 1x2x64x32 ...] [--form flash math] [--dtype fp32] [--causal]
"""

from __future__ import annotations

import argparse
import secrets
import time

import torch

from flashbench.inputs import Shape
from flashbench.measure.speed import SpeedCase
from flashbench.measure.speedgrad import GradJudge
from flashbench.timed.attention import grad_maker, pass_call

SDPA = torch.nn.functional.scaled_dot_product_attention


def _math(q, k, v, is_causal=False):
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        return SDPA(q, k, v, is_causal=is_causal)


FORMS = {"flash": SDPA, "math": _math}  # torch's own choice on CPU: its flash kernel


def rates(shape: str, form: str, contents: int, dtype: str = "fp32", causal: bool = False,
          runs: tuple = (10, 200)) -> dict:
    """For each run size n, of the runs ``contents`` draws make: how many fail with each
    content judged alone (against its own standard backward, rows dealt as in a run of n:
    the rule before 2026-12-07) and how many by the run's extremes (one judge, finish);
    and up to 3 messages of the second."""
    case = SpeedCase(Shape.parse(shape), dtype, causal, "bwd")
    make = grad_maker(case.shape, dtype)
    setup, call = pass_call(lambda q, k, v: FORMS[form](q, k, v, is_causal=causal), "bwd")
    examples = []
    # run size -> [its judge, runs, failed alone, failed by the extremes, this run's alone]
    slots = {n: [None, 0, 0, 0, False] for n in runs}

    def judged(n: int) -> GradJudge:
        judge = GradJudge(case, make, 0)
        judge.contents = n
        return judge

    for i in range(contents):
        content = (secrets.randbits(62), secrets.randbits(62))
        q, k, v, do = make(content)
        grads = call(*setup(q, k, v), do)
        for n, slot in slots.items():
            alone = judged(n)
            alone.judge(content, grads)
            slot[4] = slot[4] or alone.finish() is not None
            slot[0] = slot[0] or judged(n)
            slot[0].judge(content, grads)
            if (i + 1) % n == 0:  # a run's worth: its verdicts
                verdict = slot[0].finish()
                slot[:] = [None, slot[1] + 1, slot[2] + slot[4], slot[3] + (verdict is not None),
                           False]
                if verdict is not None and len(examples) < 3:
                    examples.append(verdict[1].split("judged): ", 1)[1])
    return {"examples": examples, "runs": {n: tuple(slot[1:4]) for n, slot in slots.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--contents", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    ap.add_argument("--shape", nargs="+", default=["1x2x64x32", "1x2x128x64"])
    ap.add_argument("--form", nargs="+", choices=sorted(FORMS), default=["flash", "math"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--causal", action="store_true", help="bottom-right causal")
    ap.add_argument("--run", type=int, nargs="+", default=[10, 200],
                    help="contents a run (its samples on new contents)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.dtype}, "
          f"{'causal' if args.causal else 'not causal'}, {args.contents} contents a line")
    sizes = tuple(sorted(set(args.run)))
    print("runs failed: each input against its own standard / by the run's extremes")
    print(f"{'shape':<12} {'form':<6} " + " ".join(f"{f'runs of {n}':>22}" for n in sizes)
          + f" {'s':>6}")
    for shape in args.shape:
        for form in args.form:
            t0 = time.perf_counter()
            r = rates(shape, form, args.contents, args.dtype, args.causal, sizes)
            cells = ["{:>22}".format(f"{r['runs'][n][1]} / {r['runs'][n][2]} of {r['runs'][n][0]}")
                     for n in sizes]
            print(f"{shape:<12} {form:<6} " + " ".join(cells)
                  + f" {time.perf_counter() - t0:>6.0f}")
            for example in r["examples"]:
                print(f"    {example[:200]}")


if __name__ == "__main__":
    main()
