"""The timed gradients' judge of ``flashbench speed --pass bwd / fwdbwd``, outside the clock.

:class:`GradJudge` checks each timed call's (dq, dk, dv) as :class:`flashbench.measure.speed.
Judge` checks a forward's o: shapes, dtypes, finiteness, a checksum against the first checked
call on the same input (another input's gradients: stale), and, once per input, random rows
(query rows of dq, key rows of dk and dv) against the float64 gradients
(:func:`flashbench.reference.attention_grad`) by the gradient rule
(:func:`flashbench.accuracy.gradient_rule`: the rows' error within 3x the same-dtype standard
backward's error plus the rounding floor, or, as ``check`` has it, within 3x the same-dtype
flash model backward's), once the run's calls are all in (:meth:`GradJudge.finish`): the
standard's error is its largest over the whole gradients of all the run's inputs, the
extreme set beside the kernel's extreme. docs/speed.md.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from flashbench.measure.speed import SpeedCase, checked_rows
from flashbench.timed.guard import STALE, WRONG

__all__ = ["GradJudge"]

GRADS = ("dq", "dk", "dv")


class _Seen(NamedTuple):
    """One content's checked rows of one gradient: their max abs error against the float64
    gradient, the standard backward's over the whole gradient, and the rounding floor."""
    content: object  # its seed, or (q, k, v's seed, dO's)
    rows: list
    err: float
    std: float
    floor: float


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
        self.verdicts: dict = {}  # content -> None or a (STALE, why): the rule's is finish's
        self.seen: dict[str, list[_Seen]] = {}  # gradient -> each content's checked rows

    def _reference_check(self, content: int, grads) -> None:
        """Records one content's checked rows: their error against the float64 gradients and
        the same-dtype standard backward's error over the whole gradient; :meth:`finish`
        judges them all."""
        from flashbench import numerics, reference
        from flashbench.accuracy import gradient_floor

        q, k, v, do = (t.double().cpu().numpy() for t in self.make(content))
        ref = reference.attention_grad(q, k, v, do, causal=self._mask())[:3]  # dsinks: untimed
        std = numerics.standard_model_grad(q, k, v, do, self.case.dtype, causal=self._mask())[:3]
        for name, got, r, s in zip(GRADS, grads, ref, std, strict=True):
            # a deck each: dq, dk and dv sharing one by n left a row of dk unchecked 1 run in 8
            rows = checked_rows(self.rng, r.shape[-2], self.decks.setdefault(name, {}),
                                self.contents)
            got = got.detach().cpu().double().numpy()[..., rows, :]
            self.seen.setdefault(name, []).append(_Seen(
                content, list(map(int, rows)), float(np.abs(got - r[..., rows, :]).max()),
                float(np.abs(np.asarray(s, np.float64) - r).max()),
                gradient_floor(r, self.case.dtype)))

    def _mask(self):
        return self.case.causal if self.case.variant is None else self.case.variant

    def _flash_errors(self, content: int) -> list[float]:
        """The same-dtype flash model backward's error over each gradient of ``content``:
        check's yardstick where a gradient fails against the standard alone."""
        from flashbench import numerics, reference

        q, k, v, do = (t.double().cpu().numpy() for t in self.make(content))
        ref = reference.attention_grad(q, k, v, do, causal=self._mask())[:3]
        flash = numerics.flash_model_grad(q, k, v, do, self.case.dtype, causal=self._mask())
        return [float(np.abs(np.asarray(f, np.float64) - r).max())
                for f, r in zip(flash[:3], ref, strict=True)]

    def finish(self) -> tuple[str, str] | None:
        """None, or (WRONG, why): the checked rows of every content judged by the gradient
        rule against the standard backward's largest error over the run's contents (or,
        where a content fails that, 3x its own flash model backward's error), module
        docstring. Each content against its own standard made the rule a draw per content:
        torch's fp32 sdpa backward at 1x2x64x32 failed 5 runs of 200 inputs in 20 so, none
        by the extremes (studies.grad_judge_rate, docs/speed.md)."""
        from flashbench.accuracy import gradient_rule

        bad, flash = [], {}
        for name in GRADS:
            seen = self.seen.get(name, [])
            std = max((s.std for s in seen), default=0.0)
            for s in sorted(seen, key=lambda s: -s.err):  # the worst failing content
                verdict = gradient_rule(s.err, std, self.case.dtype, floor=s.floor)
                if not verdict.passed:
                    if s.content not in flash:
                        flash[s.content] = self._flash_errors(s.content)
                    verdict = gradient_rule(s.err, std, self.case.dtype, floor=s.floor,
                                            fallback_error=flash[s.content][GRADS.index(name)])
                if not verdict.passed:
                    bad.append(f"{name} rows {s.rows} of input {s.content}: max abs error "
                               f"{s.err:.3g}, {verdict.words()}")
                    break
        if not bad:
            return None
        return WRONG, ("off the float64 gradients (flashbench.reference.attention_grad), by "
                       "the gradient rule (the standard's error: its largest over the "
                       f"{len(self.seen.get('dq', []))} inputs judged): " + "; ".join(bad))

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
