"""A user's own attention function, through ``flashbench check --backend module:function``
and the ``flashbench.backends`` entry-point group: judged like flashbench's kernel,
every failure named with its reason, and the other backends still run."""

import json
import sys
import textwrap

import pytest
import torch

from flashbench.backends import get_backend, resolve_backends
from flashbench.backends.user import parse_spec
from flashbench.cli import main
from flashbench.inputs import Shape

USER_MODULE = textwrap.dedent('''
    import math
    import torch

    def _attn(q, k, v, causal=False, scale=None):
        g = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        s = (q.float() @ k.float().transpose(-1, -2)) * scale
        if causal:
            nq, nk = q.shape[-2], k.shape[-2]
            keep = torch.ones(nq, nk, dtype=torch.bool).tril(nk - nq)
            s = s.masked_fill(~keep, float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        return (p @ v.float()).to(q.dtype), lse

    def good_o(q, k, v, causal=False, scale=None):
        return _attn(q, k, v, causal, scale)[0]

    def good_pair(q, k, v, causal=False, scale=None):
        return _attn(q, k, v, causal, scale)

    def grouped(q, k, v, causal=False, scale=None):
        assert k.shape[1] < q.shape[1], "grouped k, v expected"
        return _attn(q, k, v, causal, scale)
    grouped.flashbench_gqa = True

    def expanded(q, k, v, causal=False, scale=None):
        assert k.shape[1] == q.shape[1], "k, v expanded to H heads expected"
        return _attn(q, k, v, causal, scale)

    def off_lse(q, k, v, causal=False, scale=None):
        o, lse = _attn(q, k, v, causal, scale)
        return o, lse + 1e-3

    def raises(q, k, v, causal=False):
        raise RuntimeError("kernel exploded")

    def wrong_shape(q, k, v, causal=False):
        return good_o(q, k, v, causal)[..., :1, :]

    def wrong_dtype(q, k, v, causal=False):
        return good_o(q, k, v, causal).double()

    def nans(q, k, v, causal=False):
        return torch.full_like(q, float("nan"))

    def half_only(q, k, v, causal=False):
        assert q.dtype == torch.float16
        return good_o(q, k, v, causal)
    half_only.flashbench_dtypes = ("fp16",)

    def takes_dv(q, k, v, causal=False, scale=None):
        assert v.shape[-1] != q.shape[-1], "dv != d expected"
        return _attn(q, k, v, causal, scale)
    takes_dv.flashbench_dv = True

    def dims_dv(q, k, v, causal=False, scale=None):
        assert {q.shape[-1], v.shape[-1]} <= {32, 64}, "a head dim it does not take"
        return _attn(q, k, v, causal, scale)
    dims_dv.flashbench_dv = True
    dims_dv.flashbench_head_dims = (32, 64)

    NOT_A_FUNCTION = 3
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """``fbuser_kern`` importable from a temp dir on sys.path."""
    (tmp_path / "fbuser_kern.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fbuser_kern", raising=False)
    yield tmp_path
    sys.modules.pop("fbuser_kern", None)


def check_json(capsys, *args):
    rc = main(["check", "--dtype", "fp32", "--dist", "normal", "--json", "--quiet", *args])
    return rc, json.loads(capsys.readouterr().out)


def rows(report, backend):
    return [r for r in report["backends"] if r["backend"] == backend]


def test_a_good_user_function_passes_and_counts(user_module, capsys):
    rc, report = check_json(capsys, "--shape", "1x2x64x32", "--backend", "torch-naive",
                            "--backend", "fbuser_kern:good_o", "--backend", "fbuser_kern:good_pair")
    assert rc == 0 and report["passed"]
    for name in ("fbuser_kern:good_o", "fbuser_kern:good_pair"):
        got = rows(report, name)
        assert len(got) == 2 and all(r["passed"] and r["peer"] is False for r in got)
        assert all(r["o"]["max_abs"] < 1e-5 for r in got)
    assert {r["backend"] for r in report["backends"]} == {
        "torch-naive", "fbuser_kern:good_o", "fbuser_kern:good_pair"}  # names select


FAILURES = {
    "raises": "raised RuntimeError: kernel exploded",
    "wrong_shape": "returned o of shape (1, 2, 1, 32); expected [B, H, Nq, dv] = (1, 2, 64, 32)",
    "wrong_dtype": "returned o in torch.float64; expected torch.float32",
    "nans": "returned 4096 non-finite value(s) (inf or NaN) in o, of 4096, for finite inputs",
    "NOT_A_FUNCTION": "fbuser_kern:NOT_A_FUNCTION is an int, not a function",
    "missing": "cannot import fbuser_kern:missing: AttributeError",
}


def test_each_failure_is_named_and_fails_the_check(user_module, capsys):
    """Each broken function FAILs with its own reason, all in one check; the peer ran."""
    names = [f"fbuser_kern:{fn}" for fn in FAILURES]
    rc, report = check_json(capsys, "--shape", "1x2x64x32", "--causal", "off",
                            "--backend", "torch-naive",
                            *(a for n in names for a in ("--backend", n)))
    assert rc == 1 and not report["passed"]
    for name, reason in zip(names, FAILURES.values(), strict=True):
        (row,) = rows(report, name)
        assert row["passed"] is False and row["peer"] is False and reason in row["failed"], row
    assert rows(report, "torch-naive")[0]["passed"] in (True, False)  # the peer still ran
    assert "o" in rows(report, "torch-naive")[0]


def test_a_module_that_does_not_import_fails_with_its_reason(tmp_path, monkeypatch, capsys):
    (tmp_path / "fbuser_broken.py").write_text("import no_such_module_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["check", "--shape", "1x1x32x16", "--dtype", "fp32", "bf16", "--dist", "normal",
               "--causal", "off", "--quiet", "--backend", "fbuser_broken:attn",
               "--backend", "sdpa-math", "--tables"])
    text = capsys.readouterr().out
    assert rc == 1 and "RESULT: FAIL" in text
    assert ("fbuser_broken:attn FAIL (cannot import fbuser_broken:attn: ModuleNotFoundError: "
            "No module named 'no_such_module_anywhere')") in text
    assert "sdpa-math" in text and "PASS (peer)" in text  # the other backend ran
    sys.modules.pop("fbuser_broken", None)


def test_grouped_kv_reaches_only_functions_that_declare_it(user_module, capsys):
    """grouped asserts it gets Hkv < H heads, expanded that it gets H: both pass."""
    rc, report = check_json(capsys, "--shape", "1x4x64x32", "--kv-heads", "2", "--causal", "off",
                            "--backend", "fbuser_kern:grouped", "--backend", "fbuser_kern:expanded")
    assert rc == 0, report
    judged = {r["backend"] for r in report["backends"] if r.get("passed")}
    assert {"fbuser_kern:grouped", "fbuser_kern:expanded"} <= judged
    assert all("Hkv=2" in r["case"] for r in report["backends"])


def test_declared_dtypes_are_respected(user_module, capsys):
    rc = main(["check", "--shape", "1x1x32x16", "--dtype", "fp32", "fp16", "--dist", "normal",
               "--causal", "off", "--json", "--quiet", "--backend", "fbuser_kern:half_only"])
    report = json.loads(capsys.readouterr().out)
    records = rows(report, "fbuser_kern:half_only")
    assert rc == 0 and [r["dtype"] for r in records if "skipped" not in r] == ["fp16"]
    # the dtype it does not take is said, not dropped: "RESULT: PASS" told nothing of it (a
    # probe, 2026-12-07); the kernel judged on the other still passes the run
    assert [(r["dtype"], r["skipped"]) for r in records if "skipped" in r] == [
        ("fp32", "takes fp16, not fp32 (a function of yours declares more: "
                 "fn.flashbench_dtypes)")]
    assert report["passed"] is True and "unjudged" not in report


def test_dv_reaches_only_functions_that_declare_it(user_module, capsys):
    """flashbench_dv = True: a function takes v of another head dim (192/128); one that
    declares nothing is skipped with the reason, the others still run."""
    rc, report = check_json(capsys, "--shape", "1x2x32x48/16", "--causal", "off",
                            "--backend", "fbuser_kern:takes_dv", "--backend",
                            "fbuser_kern:good_pair")
    assert rc in (0, 1), report  # the verdicts of a 32-key fp32 problem are not the point
    ran = rows(report, "fbuser_kern:takes_dv")
    assert ran and all("o" in r and "skipped" not in r for r in ran)
    skipped = rows(report, "fbuser_kern:good_pair")
    assert skipped and all("declares no dv != d" in r["skipped"] for r in skipped)


def test_declared_head_dims_bound_dv_too(user_module, capsys):
    """A red team (2026-12-06): a function declaring head dims (64, 128) and dv was called at
    128/40, a value head dim it never takes (a FAIL of its own making). d and dv each must be
    one of them; the case is skipped with the reason."""
    rc, report = check_json(capsys, "--shape", "1x2x32x64/16", "--shape", "1x2x32x64/32",
                            "--causal", "off", "--dtype", "fp32", "--backend",
                            "fbuser_kern:dims_dv")
    ran = rows(report, "fbuser_kern:dims_dv")
    skipped = [r for r in ran if "skipped" in r]
    assert [r["skipped"] for r in skipped] == [
        "head dim dv=16 is not one it takes (32, 64)"], skipped
    assert [r for r in ran if "o" in r and "dv=32" in r["case"]], ran


def test_timed_callable_is_the_bare_function(user_module):
    b = get_backend("fbuser_kern:good_o")
    q = torch.randn(1, 2, 8, 16)
    assert b.origin == "user" and not b.peer and b.timed_fn(q, q, q).shape == (1, 2, 8, 16)


def test_bad_backend_arguments_exit_2_with_one_line(capsys):
    """One real process (the exit status as a shell sees it), the other value through
    main in this process (a process costs 2 s of CPU importing torch)."""
    import subprocess

    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "check", "--shape",
                        "1x1x8x16", "--backend", "nosuch"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown backend 'nosuch'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    rc = main(["check", "--shape", "1x1x8x16", "--backend", "a b:c"])
    err = capsys.readouterr().err
    assert rc == 2 and "is not of the form package.module:function" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ValueError, match="package.module:function"):
        parse_spec("mod:")


@pytest.fixture
def entry_point(user_module, monkeypatch):
    """A fake installed distribution whose entry point names fbuser_kern's functions."""
    dist = user_module / "fbuser_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fbuser-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[flashbench.backends]\nmykernel = fbuser_kern:good_pair\nbroken = fbuser_kern:nans\n"
        "triton = fbuser_kern:good_o\n")
    return dist


def test_entry_points_join_the_check(entry_point, capsys):
    names = resolve_backends()
    assert {"mykernel", "broken", "triton-entry-point"} <= set(names)  # clash renamed
    assert "reference" not in names and {"triton", "torch-naive", "torch-sdpa"} <= set(names)
    import torch

    # the pinned SDPA kernels and flex run unasked on a GPU machine only
    assert ("sdpa-cudnn" in names) == ("flex" in names) == torch.cuda.is_available()
    assert get_backend("mykernel").origin == "entry point mykernel = fbuser_kern:good_pair"
    rc, report = check_json(capsys, "--shape", "1x2x64x32", "--causal", "off",
                            "--backend", "mykernel")
    assert rc == 0 and rows(report, "mykernel")[0]["passed"]
    rc, report = check_json(capsys, "--shape", "1x2x64x32", "--causal", "off",
                            "--backend", "mykernel", "--backend", "broken")
    assert rc == 1 and "non-finite" in rows(report, "broken")[0]["failed"]
    assert rows(report, "mykernel")[0]["passed"]


def test_a_function_that_returns_only_o_is_judged_on_o_alone(user_module, capsys, monkeypatch):
    """Finding 8: the LSE of a kernel that returns only o is not its own: the record and
    the check table say "not returned by the kernel (not judged)", and it does not count
    towards passed (a wrong stand-in, patched in here, cannot fail it). A pair's LSE is
    the kernel's own and is judged."""
    from flashbench.backends import outputs
    from flashbench.cli.check_tables import render_tables
    from flashbench.measure.records import LSE_NOT_RETURNED

    monkeypatch.setattr(outputs, "reference_lse", lambda q, k, v, causal, scale:
                        torch.zeros(q.shape[:3]))  # a stand-in that would fail any rule
    rc, report = check_json(capsys, "--shape", "1x2x64x32", "--causal", "off",
                            "--backend", "fbuser_kern:good_o", "--backend", "fbuser_kern:good_pair")
    (only_o,) = rows(report, "fbuser_kern:good_o")
    assert only_o["passed"] and only_o["lse_note"] == LSE_NOT_RETURNED
    assert "lse" not in only_o and "lse_ratio" not in only_o  # no stand-in numbers shown
    (pair,) = rows(report, "fbuser_kern:good_pair")
    assert pair["passed"] and "lse_note" not in pair and pair["lse_ratio"] < 2
    assert rc == 0 and report["passed"]
    assert LSE_NOT_RETURNED in render_tables(report)


def test_a_wrong_lse_of_its_own_fails_the_kernel(user_module):
    """The kernel's own LSE is judged: a pair whose LSE is off fails (o is right)."""
    from flashbench.measure.forward import measure_accuracy
    from flashbench.measure.records import Case

    (rec,) = measure_accuracy(Case(Shape(1, 2, 64, 64, 32)), ["fp32"], ["fbuser_kern:off_lse"])
    assert rec.lse_note is None and rec.o_ratio < 2 and rec.lse_ratio > 2 and not rec.passed
