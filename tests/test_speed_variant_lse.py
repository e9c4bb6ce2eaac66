"""A variant's returned LSE in `flashbench speed` is judged against the same-dtype flash
model's LSE error, not the standard attention's: a red team (2026-12-07) had bf16 kernels
that skipped their softcap or their sinks PASS speed (their O within bf16's rounding, their
LSE within the bf16 standard's 0.01-0.05 error), while check put such an LSE at 7,000x
its band."""

import json
import textwrap

import pytest

from flashbench.cli import main

KERNELS = textwrap.dedent('''
    import torch

    def _attention(q, k, v, causal, softcap, sinks):
        """Attention with fp32 scores and LSE (a flash kernel's), o in q's dtype."""
        s = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
        if softcap is not None:
            s = softcap * torch.tanh(s / softcap)
        if causal:
            n, m = s.shape[-2:]
            hide = torch.ones(n, m, dtype=torch.bool).triu(m - n + 1)
            s = s.masked_fill(hide, float("-inf"))
        if sinks is not None:
            sink = torch.tensor(sinks, dtype=torch.float32).view(1, -1, 1, 1)
            s = torch.cat([s, sink.expand(*s.shape[:-1], 1)], -1)
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - lse[..., None])[..., :k.shape[-2]]
        return (p @ v.float()).to(q.dtype), lse

    def honest(q, k, v, causal=False, scale=None, softcap=None, sinks=None):
        return _attention(q, k, v, causal, softcap, sinks)

    def capless(q, k, v, causal=False, scale=None, softcap=None, sinks=None):
        return _attention(q, k, v, causal, None, sinks)

    def sinkless(q, k, v, causal=False, scale=None, softcap=None, sinks=None):
        return _attention(q, k, v, causal, softcap, None)

    def sinkless_lse(q, k, v, causal=False, scale=None, softcap=None, sinks=None):
        """O with its sinks, the LSE without them."""
        return (_attention(q, k, v, causal, softcap, sinks)[0],
                _attention(q, k, v, causal, softcap, None)[1])

    for _f in (honest, capless, sinkless, sinkless_lse):
        _f.flashbench_variants = ("softcap", "sinks")
''')


@pytest.mark.parametrize("variant, cheat", [
    (["--shape", "1x2x128x64", "--softcap", "50", "--causal", "on"], "capless"),
    (["--shape", "1x2x512x64", "--sinks"], "sinkless_lse")])  # a sink: 1 logit among 513
def test_a_bf16_kernel_that_skips_its_variant_fails_by_its_lse(user_module, capsys, variant,
                                                               cheat):
    user_module("fbvarlse", KERNELS)
    rc = main(["speed", "--quiet", "--json", "--seed", "17", "--dtype", "bf16", *variant,
               "--only", "fbvarlse:honest", f"fbvarlse:{cheat}"])
    rows = {r["backend"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    honest, bad = rows["fbvarlse:honest"], rows[f"fbvarlse:{cheat}"]
    assert honest["status"] == "PASS", (honest["failures"], honest["reason"])
    assert rc == 1 and bad["status"] == "FAIL", bad
    why = bad["failures"]["wrong"]
    assert why.startswith("lse off the float64 reference") and "flash model's LSE" in why, why


def test_a_kernel_that_skips_its_sinks_fails_by_its_o(user_module, capsys):
    """The sinks are drawn N(0, 1) + log(Nk) - 2 (inputs.sink_logits), about 8% of a row:
    the red team's bf16 kernel that skipped them (O and LSE) failed by its LSE alone, its O
    within bf16's rounding beside plain N(0, 1) sinks; its O fails now (12x here)."""
    user_module("fbvarlso", KERNELS)
    rc = main(["speed", "--quiet", "--json", "--seed", "17", "--dtype", "bf16", "--shape",
               "1x2x512x64", "--sinks", "--only", "fbvarlso:sinkless"])
    (row,) = [r for r in json.loads(capsys.readouterr().out)["rows"]
              if r["backend"] == "fbvarlso:sinkless"]
    assert rc == 1 and row["status"] == "FAIL", row
    assert row["failures"]["wrong"].startswith("off the float64 reference of sinks"), row
