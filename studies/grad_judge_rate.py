"""Study: how often does speed's gradient judge fail an honest backward? (issue 35)

Question: ``flashbench speed --pass bwd`` judges each content's timed (dq, dk, dv) on 8
random rows and the first and last by the gradient rule (3x the same-dtype standard
backward's max error + floor, the flash model's as the fallback yardstick:
flashbench.measure.speedgrad.GradJudge). For honest backwards on CPU (torch's sdpa, whose
fp32 flash kernel takes an approximate exp, and sdpa's math form), on CONTENTS random
contents drawn as a speed run draws them: how many does it judge wrong? A speed row checks
6-13 contents, so 1 in 400 fails a run in about 30-70 (a torch peer's FAIL is information
only; a user kernel's fails the run).
Answer: docs/speed.md ("Passes").

Usage: python -m studies.grad_judge_rate [--contents 20000] [--threads 1]
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


def rates(shape: str, form: str, contents: int, dtype: str = "fp32",
          causal: bool = False) -> dict:
    """Contents the judge fails, of ``contents`` drawn, and up to 3 of its messages."""
    case = SpeedCase(Shape.parse(shape), dtype, causal, "bwd")
    make = grad_maker(case.shape, dtype)
    setup, call = pass_call(lambda q, k, v: FORMS[form](q, k, v, is_causal=causal), "bwd")
    judge, failed, examples = GradJudge(case, make, 0), 0, []
    for _ in range(contents):
        content = (secrets.randbits(62), secrets.randbits(62))
        q, k, v, do = make(content)
        verdict = judge.judge(content, call(*setup(q, k, v), do))
        failed += verdict is not None
        if verdict is not None and len(examples) < 3:
            examples.append(verdict[1].split(": ", 1)[1])
    return {"failed": failed, "examples": examples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    ap.add_argument("--contents", type=int, default=20000)
    ap.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    ap.add_argument("--shape", nargs="+", default=["1x2x64x32", "1x2x128x64"])
    ap.add_argument("--form", nargs="+", choices=sorted(FORMS), default=["flash", "math"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--causal", action="store_true", help="bottom-right causal")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.dtype}, "
          f"{'causal' if args.causal else 'not causal'}, {args.contents} contents a line")
    print(f"{'shape':<12} {'form':<6} {'judged wrong':>12} {'s':>6}")
    for shape in args.shape:
        for form in args.form:
            t0 = time.perf_counter()
            r = rates(shape, form, args.contents, args.dtype, args.causal)
            print(f"{shape:<12} {form:<6} {r['failed']:>12} {time.perf_counter() - t0:>6.0f}")
            for example in r["examples"]:
                print(f"    {example[:200]}")


if __name__ == "__main__":
    main()
