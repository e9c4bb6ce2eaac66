"""Packed batches whose sequences have fewer (or more) queries than keys: `--varlen Q:K`.
A red team (2026-12-06): `check --varlen` drew queries and keys alike, so a packed kernel
that cut K and V at `cu_seqlens_q` (or used `max_seqlen_q` for keys) PASSed every run."""

from __future__ import annotations

import json
import subprocess
import textwrap

import numpy as np
import pytest
import torch

from flashbench.inputs.lengths import parse_lengths
from flashbench.inputs.problem import Shape, make_qkv, make_varlen_qkv

KERNELS = textwrap.dedent('''
    import torch

    def _seq(q, k, v, causal, scale):
        nq, nk = q.shape[0], k.shape[0]
        qh, kh, vh = (x.transpose(0, 1).double() for x in (q, k, v))
        s = qh @ kh.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
        if causal:  # bottom-right aligned within the sequence
            i, j = torch.arange(nq)[:, None], torch.arange(nk)[None, :]
            s = s.masked_fill(j > i + nk - nq, float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
        return (p @ vh).nan_to_num(0.0).transpose(0, 1).to(q.dtype), lse.float()

    def _packed(q, k, v, cu_q, cu_k, causal, scale):
        cq, ck = cu_q.tolist(), cu_k.tolist()
        got = [_seq(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], causal, scale)
               for b in range(len(cq) - 1)]
        return torch.cat([o for o, _ in got]), torch.cat([l for _, l in got], dim=-1)

    def good(q, k, v, causal=False, scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
             max_seqlen_q=None, max_seqlen_k=None):
        return _packed(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale)

    def mixed(q, k, v, causal=False, scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
              max_seqlen_q=None, max_seqlen_k=None):
        return _packed(q, k, v, cu_seqlens_q, cu_seqlens_q, causal, scale)  # keys cut as q

    def first_key(q, k, v, causal=False, scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
                  max_seqlen_q=None, max_seqlen_k=None):
        """Right but where a causal row sees no key: it reads key 0 of its sequence (o alone:
        its LSE would give it away by its structure)."""
        o, lse = _packed(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, scale)
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for b in range(len(cq) - 1):
            blind = (cq[b + 1] - cq[b]) - (ck[b + 1] - ck[b]) if causal else 0
            if ck[b + 1] > ck[b] and blind > 0:
                o[cq[b]:cq[b] + blind] = v[ck[b]].to(o.dtype)
        return o

    good.flashbench_varlen = mixed.flashbench_varlen = first_key.flashbench_varlen = True
''')


def test_an_item_q_colon_k_gives_key_lengths_and_equal_ones_give_none():
    spec = parse_lengths("30:45,17,25:9")
    assert spec.draw() == (30, 17, 25) and spec.keys == (45, 17, 9)
    assert parse_lengths("5:5,6").keys is None and parse_lengths("uniform:1-9:3").keys is None
    # a Q:K item after plain ones (read as a distribution's name before: a red team)
    assert parse_lengths("1,1,1,40:2").keys == (1, 1, 1, 2)
    assert parse_lengths("5,3:2").draw() == (5, 3)
    for bad, why in (("1:2:3", "an item is a length N or Q:K"), ("0:5", "must not all be 0"),
                     ("5:0,3:0", "key lengths must not all be 0"),
                     ("3:0,0:4", "no sequence has both queries and keys"),
                     ("4:x", "each key length must be an int")):
        with pytest.raises(ValueError, match=why):
            parse_lengths(bad)


def test_equal_lengths_draw_as_before_and_key_lengths_cut_k_and_v():
    shape = Shape(1, 2, 1, 1, 16, Hkv=1)
    q, k, v, cu, cu_k = make_varlen_qkv((3, 5), shape, "normal", 7)
    dense = make_qkv(Shape(1, 2, 8, 8, 16, Hkv=1), "normal", 7)
    assert np.array_equal(q, np.swapaxes(dense[0][0], 0, 1)) and np.array_equal(cu, cu_k)
    q, k, v, cu, cu_k = make_varlen_qkv((3, 5), shape, "normal", 7, key_lengths=(6, 0))
    assert q.shape[0] == 8 and k.shape[0] == v.shape[0] == 6
    assert list(cu) == [0, 3, 8] and list(cu_k) == [0, 6, 6]


def test_a_peers_packed_path_gives_a_sequence_with_no_key_zeros_and_minus_inf():
    from flashbench.backends import get_backend

    q, k, v = torch.randn(7, 2, 16), torch.randn(5, 2, 16), torch.randn(5, 2, 16)
    cu_q, cu_k = torch.tensor([0, 4, 7]), torch.tensor([0, 0, 5])
    o, lse = get_backend("torch-sdpa").varlen(q, k, v, cu_q, cu_k)
    assert (o[:4] == 0).all() and torch.isneginf(lse[:, :4]).all()
    assert torch.isfinite(lse[:, 4:]).all()


@pytest.fixture
def cli(user_module, capsys):
    """``cli(*args)``: ``flashbench *args`` through the CLI's main in this process (its
    workers, a user kernel's among them, as a subprocess's: python and torch's import, 2-3 s
    of CPU a run, spared), the kernels above as module ``pk``: (exit status, stdout, stderr)
    as a process's."""
    from flashbench.cli import main

    user_module("pk", KERNELS)

    def run(*args):
        capsys.readouterr()
        status = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, status, out, err)

    return run


def test_check_fails_a_kernel_that_cuts_keys_at_the_queries_offsets(cli):
    r = cli("check", "--json", "--varlen", "30:45,17,25:9,6:0", "--dtype", "fp32", "--pass",
            "fwd", "--only", "pk:good", "pk:mixed")
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr
    rows = json.loads(r.stdout)["backends"]
    assert {(x["backend"], x["passed"]) for x in rows} == {("pk:good", True),
                                                         ("pk:mixed", False)}
    assert all(x["case"].split()[2] == "30:45,17,25:9,6:0" for x in rows)
    # its cause, tried: the reference with the queries' offsets for the keys
    mixed = next(x for x in rows if x["backend"] == "pk:mixed")
    assert "the queries' offsets (cu_seqlens_q) used for the keys too" in mixed["diagnosis"]
    assert "worst in sequence" in mixed["worst_at"]


def test_speed_times_q_colon_k_and_fails_a_kernel_that_cuts_keys_at_the_queries(cli):
    """speed --varlen takes Q:K items (it refused them before): torch's packed path and an
    honest user kernel PASS, one that cuts K, V at cu_seqlens_q FAILs by its timed outputs;
    FLOPs count each sequence's Nq x Nk (bottom-right causal) pairs."""
    from flashbench.measure.speed import SpeedCase

    r = cli("speed", "--json", "--varlen", "30:45,17,25:9,6:0", "--dtype", "fp32", "--causal",
            "on", "--shape", "1x2x64x16", "--only", "torch-sdpa", "pk:good", "pk:mixed")
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert {(x["backend"], x["status"]) for x in rows} == {
        ("torch-sdpa", "PASS"), ("pk:good", "PASS"), ("pk:mixed", "FAIL")}, rows
    assert all(x["case"].startswith("varlen 30:45,17,25:9,6:0 H=2 d=16") for x in rows)
    mixed = next(x for x in rows if x["backend"] == "pk:mixed")
    assert "off the float64 reference of their sequences" in mixed["failures"]["wrong"]
    assert "queries," in mixed["failures"]["wrong"] or "length 17" in mixed["failures"]["wrong"]
    case = SpeedCase(Shape(4, 2, 30, 45, 16), "fp32", True, "fwd", None, (30, 17, 25, 6),
                     (45, 17, 9, 0))
    pairs = sum(nq * nk - nq * (nq - 1) // 2 if nk >= nq else nk * (nk + 1) // 2
                for nq, nk in ((30, 45), (17, 17), (25, 9)))
    assert case.flops() == pytest.approx(4 * 2 * 16 * pairs)


@pytest.mark.parametrize("seed", ["1", "2"])
def test_speed_checks_the_first_row_of_each_sequence(cli, seed):
    """A causal 100:99 sequence's first row sees no key: a kernel that gives it key 0 FAILs
    at every seed (the packed judge checked a random and the last row of each sequence: it
    passed 2 runs in 3, a red team)."""
    r = cli("speed", "--json", "--varlen", "100:99,50,50,50", "--dtype", "fp32", "--causal",
            "on", "--shape", "1x2x64x16", "--seed", seed, "--only", "pk:first_key")
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr
    (row,) = json.loads(r.stdout)["rows"]
    assert row["status"] == "FAIL" and "a row that sees no key must be 0" in str(row["failures"])


SINKS_KERNEL = textwrap.dedent('''
    import torch

    def _seq(q, k, v, causal, sinks):
        nq, nk = q.shape[0], k.shape[0]
        qh, kh, vh = (x.transpose(0, 1).double() for x in (q, k, v))
        s = qh @ kh.transpose(-1, -2) * q.shape[-1] ** -0.5
        if causal:
            i, j = torch.arange(nq)[:, None], torch.arange(nk)[None, :]
            s = s.masked_fill(j > i + nk - nq, float("-inf"))
        sink = torch.tensor(sinks, dtype=torch.float64)[:, None, None].expand(-1, nq, 1)
        lse = torch.logsumexp(torch.cat([s, sink], -1), -1)
        return (torch.exp(s - lse[..., None]) @ vh).transpose(0, 1).to(q.dtype), lse.float()

    def packed(q, k, v, causal=False, scale=None, cu_seqlens_q=None, cu_seqlens_k=None,
               max_seqlen_q=None, max_seqlen_k=None, sinks=None):
        assert isinstance(sinks, tuple) and all(type(x) is float for x in sinks), sinks
        cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        got = [_seq(q[cq[b]:cq[b + 1]], k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]], causal, sinks)
               for b in range(len(cq) - 1)]
        return torch.cat([o for o, _ in got]), torch.cat([l for _, l in got], dim=-1)

    packed.flashbench_varlen = True
    packed.flashbench_variants = ("sinks",)
''')


def test_a_packed_kernel_takes_its_sinks_as_the_docs_say(user_module, cli):
    """A packed batch's sinks reached the worker as a NumPy array, which its loader refuses:
    every packed kernel ended with "its worker process ended during the call" under --sinks
    (a probe, 2026-12-07). They arrive as a tuple of H floats, as the dense path's do."""
    user_module("pksinks", SINKS_KERNEL)
    r = cli("check", "--json", "--varlen", "70,100", "--dtype", "fp32", "--causal", "on",
            "--sinks", "--pass", "fwd", "--only", "pksinks:packed")
    rows = json.loads(r.stdout)["backends"]
    assert [(x["backend"], x["passed"]) for x in rows] == [("pksinks:packed", True)], rows
    assert r.returncode == 0, r.stdout[-2000:]
