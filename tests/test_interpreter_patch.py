"""An interpreted launch patches triton.language once: its jitted helpers' calls reuse the
launch's patch (flashbench.kernels.interpreter), with the same bits as a re-patched call."""

import pytest

torch = pytest.importorskip("torch")
ti = pytest.importorskip("triton.runtime.interpreter")

from flashbench.kernels import interpreter  # noqa: E402
from flashbench.kernels.attention import triton_attention  # noqa: E402


def _run(monkeypatch, reuse: bool):
    """(o, lse, how many times triton.language was patched) of one small interpreted
    forward; ``reuse=False``: every helper call re-patches, as Triton's own twin does."""
    calls = []
    patch = ti._patch_lang

    def counted(fn):
        calls.append(fn.__name__)
        return patch(fn)

    monkeypatch.setattr(ti, "_patch_lang", counted)
    if not reuse:
        monkeypatch.setattr(interpreter, "_call_interpreted",
                            lambda self, *a, **k: interpreter.twin(self.fn)(*a, **k))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 48, 32, generator=g) for _ in range(3))
    o, lse = triton_attention(q, k, v, causal=True)[:2]
    monkeypatch.undo()
    return o, lse, len(calls)


def test_helpers_reuse_the_launch_patch_with_the_same_bits(monkeypatch):
    """Failed before: every jitted helper call patched triton.language again (8,256 patches
    in bench_accuracy's set-up, a third of its interpreted time)."""
    o, lse, patched = _run(monkeypatch, reuse=True)
    o_slow, lse_slow, patched_slow = _run(monkeypatch, reuse=False)
    assert patched_slow > patched, (patched, patched_slow)
    launches = patched  # one patch a launch (a grid), none a helper call
    assert launches <= 2, launches
    assert torch.equal(o, o_slow) and torch.equal(lse, lse_slow)
    for m in interpreter.language_objects()[:2]:  # put back after the launch
        assert not callable(vars(m).get("range")) or vars(m)["range"].__module__ != ti.__name__
