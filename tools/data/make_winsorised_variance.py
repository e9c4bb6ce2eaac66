"""Compute the winsorised-variance factors (kappa, nu) that the review ships.

``flashbench.review.stats.winsorised_variance(n, g)`` reads them from
``flashbench/data/winsorised_variance.json`` so that no verdict depends on numpy's
random stream at run time (numpy does not promise its streams across versions). This
script is that table's only source: a Monte Carlo over ``--samples`` standard normal
samples per ``n`` (seeded by ``n``), for every ``g`` from 1 to ``floor(TRIM n)`` and
``n`` from ``MIN_TRIM_ROUNDS`` to ``--max-n``. tests/test_review_stats.py recomputes a
few entries with another seed and compares them within Monte Carlo error.

    nice python -m tools.data.make_winsorised_variance     # rewrites the table (~1 min)
    python -m tools.data.make_winsorised_variance --check  # differences only, writes nothing
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

from flashbench.review.prior import trigamma_inverse  # noqa: E402
from flashbench.review.stats import MIN_TRIM_ROUNDS, TRIM, WINSORISED_TABLE  # noqa: E402

SEED = 20041  # Smyth 2004: any fixed number; each n draws from SeedSequence((SEED, n))


def winsorised_monte_carlo(n: int, gs, samples: int, rng: np.random.Generator
                           ) -> dict[int, tuple[float, float]]:
    """``{g: (kappa, nu)}`` estimated from ``samples`` standard normal samples of size
    ``n``: kappa the mean of s_w^2, nu from the variance of log s_w^2."""
    x = np.sort(rng.standard_normal((samples, n)), axis=1)
    out = {}
    for g in gs:
        w = np.clip(x, x[:, [g]], x[:, [n - g - 1]])
        v = np.var(w, axis=1, ddof=1)
        out[g] = float(v.mean()), 2.0 * trigamma_inverse(float(np.log(v).var()))
    return out


def table(max_n: int, samples: int) -> list[list]:
    rows = []
    for n in range(MIN_TRIM_ROUNDS, max_n + 1):
        gs = [g for g in range(1, math.floor(TRIM * n) + 1) if 2 * g < n - 1]
        rng = np.random.default_rng(np.random.SeedSequence((SEED, n)))
        for g, (kappa, nu) in winsorised_monte_carlo(n, gs, samples, rng).items():
            rows.append([n, g, round(kappa, 6), round(nu, 4)])
    return rows


def dumps(doc: dict) -> str:
    """The table as JSON, one entry a line."""
    head = json.dumps({k: v for k, v in doc.items() if k != "factors"}, indent=1)[:-2]
    return (head + ',\n "factors": [\n  ' + ",\n  ".join(json.dumps(r) for r in doc["factors"])
            + "\n ]\n}\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-n", type=int, default=64)
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--check", action="store_true", help="print differences, write nothing")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    rows = table(args.max_n, args.samples)
    doc = {"about": "kappa = E[s_w^2]/sigma^2 and nu (chi-square degrees of freedom matched "
                    "on var(log s_w^2)) of the winsorised variance of n standard normal "
                    "values, g winsorised at each end: "
                    "python -m tools.data.make_winsorised_variance",
           "samples": args.samples, "seed": SEED, "numpy": np.__version__,
           "factors": rows}
    if args.check:
        old = {(n, g): (k, v) for n, g, k, v in json.loads(WINSORISED_TABLE.read_text())
               ["factors"]}
        worst = max(abs(k / old[n, g][0] - 1) for n, g, k, _ in rows if (n, g) in old)
        print(f"{len(rows)} entries; largest relative change of kappa {worst:.2e}")
        return 0
    WINSORISED_TABLE.write_text(dumps(doc))
    print(f"wrote {len(rows)} entries to {WINSORISED_TABLE} in {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
