"""A user's decode kernel is untrusted code too (docs/check.md): it runs in a worker process
of its own as a forward one does, so whatever it does to its inputs, the process or stdout,
it fails alone, by name, and every other verdict of ``check --decode`` stands. A decode
function given to a forward check is refused by name."""

import json
import sys
import textwrap

import pytest
from test_untrusted import installed, interpreted, stopped_at, triton_kernels  # noqa: F401 - fixture

from flashbench.cli import main

CASE = "2x4/2x2x16:70,33:p16"
KERNELS = textwrap.dedent('''
    import os
    import sys
    import time

    import torch

    from flashbench import reference


    def decode(fn):
        fn.flashbench_kind = "decode"
        return fn


    def _decode(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
        np64 = lambda t: None if t is None else t.cpu().numpy().copy()
        o, lse = reference.decode_attention(
            *(t.double().cpu().numpy() for t in (q, k_cache, v_cache)), np64(cache_seqlens),
            np64(block_table), causal=causal)
        return (torch.from_numpy(o).to(device=q.device, dtype=q.dtype),
                torch.from_numpy(lse).float().to(q.device))


    @decode
    def good(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
        return _decode(q, k_cache, v_cache, cache_seqlens, block_table, causal)


    @decode
    def vandal(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
        out = _decode(q, k_cache, v_cache, cache_seqlens, block_table, causal)
        q.mul_(3)
        k_cache.zero_()
        v_cache.add_(1)
        cache_seqlens.sub_(1)
        block_table.zero_()
        return out


    @decode
    def exits(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
        sys.exit(0)


    @decode
    def interrupts(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
        raise KeyboardInterrupt


    @decode
    def dies(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
        os._exit(0)


    @decode
    def hangs(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
        time.sleep(3600)


    @decode
    def chatty(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
        print("hello from the decode kernel")
        return _decode(q, k_cache, v_cache, cache_seqlens, block_table, causal)
''')
LOUD = 'print("imported and printing at import time")\nfrom fbdecode_untrusted import chatty\n'


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """``fbdecode_untrusted`` importable from a temp dir on sys.path (and by the workers)."""
    (tmp_path / "fbdecode_untrusted.py").write_text(KERNELS)
    (tmp_path / "fbdecode_loud.py").write_text(LOUD)
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in ("fbdecode_untrusted", "fbdecode_loud"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    yield tmp_path
    for module in ("fbdecode_untrusted", "fbdecode_loud"):
        sys.modules.pop(module, None)


def check(capsys, *names, dtypes=("fp32",), extra=()):
    """``check --decode`` of ``fbdecode_untrusted:NAME`` for each name (one with a colon
    as it is), its exit status and its --json report (the whole of stdout, parsed)."""
    specs = [n if ":" in n else f"fbdecode_untrusted:{n}" for n in names]
    args = [a for spec in specs for a in ("--backend", spec)]
    rc = main(["check", "--decode", "--decode-case", CASE, "--causal", "on", "--dist",
               "normal", "--dtype", *dtypes, "--json", "--quiet", *extra, *args])
    return rc, json.loads(capsys.readouterr().out)


def rows(report, name):
    spec = name if ":" in name else f"fbdecode_untrusted:{name}"
    return [r for r in report["rows"] if r["kernel"] == spec]


def test_a_decode_kernel_that_changes_its_inputs_fails_alone(kernels, capsys):
    """Probe 1: q, k_cache, v_cache, cache_seqlens and block_table changed in place after a
    correct o: that kernel FAILs by name in every dtype; the correct kernel after it, and
    flashbench's own, get the numbers they get alone (they were handed the same tensors)."""
    dtypes = ("fp32", "bf16")
    rc_alone, alone = check(capsys, "good", dtypes=dtypes, extra=("--backend", "torch-naive"))
    rc, report = check(capsys, "vandal", "good", dtypes=dtypes,
                       extra=("--backend", "torch-naive"))
    bad = rows(report, "vandal")
    assert [r["dtype"] for r in bad] == list(dtypes)
    assert all("modified its inputs in place (q, k_cache, v_cache, cache_seqlens, "
               "block_table)" in r["failed"] for r in bad), bad
    good = rows(report, "good")
    assert good == rows(alone, "good") and all(r["passed"] for r in good)
    assert [r for r in report["rows"] if "vandal" not in r["kernel"]] == alone["rows"]
    assert report["exactness"] == alone["exactness"]
    assert rc_alone == 0 and rc == 1 and not report["passed"]


def test_each_way_out_fails_the_decode_kernel_and_the_check_goes_on(kernels, capsys):
    """Probe 3: sys.exit, KeyboardInterrupt and os._exit FAIL each kernel with its reason,
    all in one check (in the harness's process they ended the check, or pytest); the
    kernel after them is still judged."""
    ways_out = {"exits": "called sys.exit(0)", "interrupts": "raised KeyboardInterrupt",
                "dies": "its worker process ended during the call (exit status 0)"}
    rc, report = check(capsys, *ways_out, "good")
    for fn, reason in ways_out.items():
        (row,) = rows(report, fn)
        assert not row["passed"] and reason in row["failed"], row
    assert rows(report, "good")[0]["passed"]
    assert rc == 1


def test_prints_of_a_decode_kernel_do_not_reach_stdout(kernels, capsys):
    """Probe 4: a decode kernel that prints (at import and per call) leaves --json
    parseable (``check`` parses the whole of stdout)."""
    rc, report = check(capsys, "fbdecode_loud:chatty")
    assert rc == 0 and rows(report, "fbdecode_loud:chatty")[0]["passed"]


def test_a_hanging_decode_kernel_is_stopped_at_the_time_limit(kernels, capsys):
    """Probe 4: a decode kernel that hangs FAILs after --timeout seconds (its later calls
    are not run), and the rest of the check reports."""
    rc, report = check(capsys, "hangs", "good", dtypes=("fp32", "fp16"),
                       extra=("--timeout", "3"))
    stopped_at(3, rows(report, "hangs"), rows(report, "good"))
    assert rc == 1


def test_a_decode_function_is_refused_by_a_forward_check(kernels, capsys):
    """Issue 28's leftover: a decode function given to a forward check, or installed in
    the forward group ``flashbench.backends``, FAILs saying what it is (it was called as
    fn(q, k, v) and failed with a TypeError, or worse, ran)."""
    installed(kernels, "fbdecode-plugin", "[flashbench.backends]\nmisfiled = "
              "fbdecode_untrusted:good\n")
    rc = main(["check", "--shape", "1x2x32x16", "--causal", "off", "--dist", "normal",
               "--dtype", "fp32", "--json", "--quiet", "--backend", "misfiled",
               "--backend", "fbdecode_untrusted:good"])
    report = json.loads(capsys.readouterr().out)
    for name in ("misfiled", "fbdecode_untrusted:good"):
        (row,) = [r for r in report["backends"] if r["backend"] == name]
        assert not row["passed"] and ("fbdecode_untrusted:good is a decode function "
                                      "(flashbench_kind = 'decode'): run it with --decode "
                                      "(check --decode") in row["failed"], row
    assert rc == 1


TRITON_DECODE = textwrap.dedent('''
    from fbtriton_user import _run


    def _decode(q, k_cache, v_cache, cache_seqlens, double_v):
        """The forward's Triton kernel on a contiguous cache as full as its capacity,
        Nq = N, GQA-free, not causal: o [B, Nq, H, d] from [B, H, Nq, d]."""
        assert bool((cache_seqlens == q.shape[1]).all()) and k_cache.shape[1] == q.shape[1]
        o, lse = _run(*(t.transpose(1, 2) for t in (q, k_cache, v_cache)), False, None,
                      double_v)
        return o.transpose(1, 2), lse


    def attn(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
        return _decode(q, k_cache, v_cache, cache_seqlens, False)


    def doubled(q, k_cache, v_cache, cache_seqlens, block_table=None, causal=False):
        return _decode(q, k_cache, v_cache, cache_seqlens, True)


    attn.flashbench_kind = doubled.flashbench_kind = "decode"
''')


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the interpreter: CPU")
def test_a_users_triton_decode_kernel_runs_interpreted_with_the_fixes(
        triton_kernels, capsys):  # noqa: F811 - the fixture imported from test_untrusted
    """Probe 5 for decode: the worker runs a user's Triton decode kernel interpreted, with
    the interpreter's bf16 dot and cast fixed (a correct kernel passes in bf16); one whose
    bf16 arithmetic the interpreter gets wrong FAILs with the interpreter named."""
    (triton_kernels / "fbtriton_decode.py").write_text(TRITON_DECODE)
    rc = main(["check", "--decode", "--decode-case", "1x2x32x16:32", "--causal", "off",
               "--dist", "normal", "--dtype", "fp32", "bf16", "--json", "--quiet",
               "--backend", "fbtriton_decode:attn", "--backend", "fbtriton_decode:doubled"])
    report = json.loads(capsys.readouterr().out)
    interpreted(rows(report, "fbtriton_decode:attn"), rows(report, "fbtriton_decode:doubled"))
    assert rc == 1


def test_a_kind_is_forward_or_decode(kernels):
    """``flashbench_kind`` defaults to "forward"; a value that is neither kind is refused
    by name (a typo never runs a decode function as a forward one)."""
    from flashbench.backends.declared import load
    from flashbench.kernels.validate import BackendFailed

    (kernels / "fbkinds.py").write_text("def odd(q):\n    pass\n\n\nodd.flashbench_kind = "
                                        "'decoder'\n\n\ndef plain(q):\n    pass\n")
    with pytest.raises(BackendFailed, match="its flashbench_kind attribute 'decoder' is not"):
        load("fbkinds:odd")
    assert load("fbkinds:plain")[1]["kind"] == "forward"
    assert load("fbdecode_untrusted:good")[1]["kind"] == "decode"
    sys.modules.pop("fbkinds", None)


def test_a_malformed_decode_entry_point_fails_by_name(kernels, capsys):
    """An installed decode entry point whose value is not module:function FAILs with that
    reason (as a forward one does); the check goes on."""
    installed(kernels, "fbdecode-bad", "[flashbench.decode_backends]\nbadvalue = not a spec\n")
    rc = main(["check", "--decode", "--decode-case", CASE, "--dtype", "fp32", "--causal",
               "on", "--dist", "normal", "--json", "--quiet", "--backend", "badvalue"])
    report = json.loads(capsys.readouterr().out)
    (row,) = [r for r in report["rows"] if r["kernel"] == "badvalue"]
    assert "its entry point value 'not a spec' is not of the form module:function" in \
        row["failed"]
    assert rc == 1
