"""The timed gradients' judge of ``flashbench speed --pass bwd / fwdbwd``, outside the clock.

:class:`GradJudge` checks each timed call's (dq, dk, dv) as :class:`flashbench.measure.speed.
Judge` checks a forward's o: shapes, dtypes, finiteness, a checksum against the first checked
call on the same input (another input's gradients: stale), and, once per input, random rows
(query rows of dq, key rows of dk and dv) against the float64 gradients
(:func:`flashbench.reference.attention_grad`) by the gradient rule
(:func:`flashbench.accuracy.gradient_rule`: the rows' error within 3x the same-dtype standard
backward's error over the whole gradient plus the rounding floor, or, as ``check`` has it,
within 3x the same-dtype flash model backward's). docs/speed.md.
"""

from __future__ import annotations

import numpy as np

from flashbench.measure.speed import SpeedCase, checked_rows
from flashbench.timed.guard import STALE, WRONG

__all__ = ["GradJudge"]

GRADS = ("dq", "dk", "dv")


def _sums(grads) -> tuple[float, ...]:
    return tuple(f(g.detach().double()) for g in grads for f in (
        lambda x: float(x.sum()), lambda x: float(x.abs().sum())))


class GradJudge:
    """Judges one case's timed gradients. ``make(seed) -> (q, k, v, do)``, the pool's maker
    (:func:`flashbench.timed.attention.grad_maker`); ``seed``: the run's (the rows checked
    are drawn from fresh OS entropy, as Judge's)."""

    def __init__(self, case: SpeedCase, make, seed: int):
        self.case, self.make = case, make
        self.rng, self.decks = np.random.default_rng(), {}  # fresh entropy: rows are secret
        self.contents = 0  # as Judge's
        self.first: dict = {}
        self.verdicts: dict = {}

    def _reference_check(self, content: int, grads) -> tuple[str, str] | None:
        from flashbench import numerics, reference
        from flashbench.accuracy import gradient_floor, gradient_rule

        q, k, v, do = (t.double().cpu().numpy() for t in self.make(content))
        mask = self.case.causal if self.case.variant is None else self.case.variant
        ref = reference.attention_grad(q, k, v, do, causal=mask)[:3]  # dsinks: not timed
        std = numerics.standard_model_grad(q, k, v, do, self.case.dtype, causal=mask)[:3]
        flash: list = []  # the flash model's gradients, made where a row fails the standard

        def fallback(i: int) -> float:
            """The same-dtype flash model backward's error over gradient i: check's
            yardstick where a gradient fails against the standard alone (an honest fp32
            sdpa backward failed 2 contents in 200 at 1x2x64x32 without it)."""
            if not flash:
                flash.extend(numerics.flash_model_grad(q, k, v, do, self.case.dtype,
                                                       causal=mask)[:3])
            return float(np.abs(np.asarray(flash[i], np.float64) - ref[i]).max())

        bad = []
        for i, (name, got, r, s) in enumerate(zip(GRADS, grads, ref, std, strict=True)):
            n = r.shape[-2]
            # a deck each: dq, dk and dv sharing one by n left a row of dk unchecked 1 run in 8
            rows = checked_rows(self.rng, n, self.decks.setdefault(name, {}), self.contents)
            got = got.detach().cpu().double().numpy()[..., rows, :]
            # the rows' error against the whole gradient's yardstick and floor (a few rows
            # of the standard backward may happen to round well)
            err = float(np.abs(got - r[..., rows, :]).max())
            std = float(np.abs(np.asarray(s, np.float64) - r).max())
            floor = gradient_floor(r, self.case.dtype)
            verdict = gradient_rule(err, std, self.case.dtype, floor=floor)
            if not verdict.passed:
                verdict = gradient_rule(err, std, self.case.dtype, floor=floor,
                                        fallback_error=fallback(i))
            if not verdict.passed:
                bad.append(f"{name} rows {list(map(int, rows))}: max abs error {err:.3g}, "
                           f"{verdict.words()}")
        if not bad:
            return None
        return WRONG, ("off the float64 gradients (flashbench.reference.attention_grad), by "
                       "the gradient rule: " + "; ".join(bad))

    def judge(self, content: int, grads) -> tuple[str, str] | None:
        """None, or (failure name, why) for one timed call's (dq, dk, dv) on ``content``."""
        import torch

        from flashbench.timed.attention import qkv_shapes
        from flashbench.timed.attention import torch_dtype as _torch_dtype

        shapes = qkv_shapes(self.case.shape)  # not the inputs rebuilt per call to read them
        dtype = _torch_dtype(self.case.dtype)
        if len(grads) != 3:
            return WRONG, f"{len(grads)} gradients, expected dq, dk, dv"
        for name, g, want in zip(GRADS, grads, shapes, strict=True):
            if not isinstance(g, torch.Tensor):
                return WRONG, f"{name} is {type(g).__name__}, not a tensor"
            if tuple(g.shape) != want or g.dtype != dtype:
                return WRONG, f"{name} is {g.dtype} {tuple(g.shape)}, expected {dtype} {want}"
            if not bool(torch.isfinite(g).all()):
                return WRONG, f"{name} holds non-finite values for finite inputs"
        total = _sums(grads)
        if content in self.first:
            first = self.first[content]
            tol = 8 * torch.finfo(dtype).eps * max(max(first), 1e-30)
            if any(abs(a - b) > tol for a, b in zip(total, first, strict=True)):
                return WRONG, "its gradients' checksum differs from the first checked call " \
                              "on the same input"
            return self.verdicts[content]
        for other, sums in self.first.items():
            if sums == total and other != content:
                self.first[content] = total
                self.verdicts[content] = (STALE, "returned the gradients of an earlier, "
                                                 "different input (a memoised backward)")
                return self.verdicts[content]
        self.first[content] = total
        self.verdicts[content] = self._reference_check(content, grads)
        return self.verdicts[content]
