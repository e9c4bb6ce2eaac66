"""``flashbench check --varlen SPEC``: a list or a seeded length distribution (parse, the
same draw for one seed, bad specs as one-line errors with exit 2, the lengths drawn in the
header), and the packed batch's gradients judged by the check."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashbench.cli import main
from flashbench.inputs.lengths import parse_lengths


def test_a_list_is_its_lengths_and_distributions_draw_within_their_range():
    spec = parse_lengths("512,0,77")
    assert not spec.seeded and spec.draw(5) == (512, 0, 77)
    uni = parse_lengths("uniform:3-9:200")
    drawn = uni.draw(0)
    assert uni.seeded and len(drawn) == 200 and min(drawn) == 3 and max(drawn) == 9
    log = parse_lengths("lognormal:100:0.5:400").draw(1)
    assert len(log) == 400 and min(log) >= 0
    assert 80 <= float(np.median(log)) <= 120  # MEDIAN is the median


@given(st.integers(0, 2**31), st.integers(1, 50), st.integers(1, 60), st.integers(1, 30))
def test_one_seed_draws_one_batch_and_seeds_differ(seed, lo, width, count):
    spec = parse_lengths(f"uniform:{lo}-{lo + width}:{count}")
    a = spec.draw(seed)
    assert a == spec.draw(seed) and len(a) == count
    assert all(lo <= n <= lo + width for n in a)
    many = parse_lengths(f"uniform:{lo}-{lo + width}:64")
    assert many.draw(seed) != many.draw(seed + 1)  # 64 draws of >= 2 values: all equal ~2^-64


@pytest.mark.parametrize("text, why", [
    ("", "each length must be an int"),
    ("a,b", "each length must be an int"),
    ("0,0", "must not all be 0"),
    ("-1,3", "each length must be >= 0"),
    ("uniform:5:3", "uniform takes LO-HI:COUNT"),
    ("uniform:9-3:4", "need LO <= HI"),
    ("uniform:0-0:4", "HI >= 1"),
    ("uniform:1-x:4", "HI must be an int"),
    ("uniform:1-8:0", "COUNT must be >= 1"),
    ("uniform:1-8:99999", "COUNT must be at most 4096"),
    ("lognormal:100:3", "lognormal takes MEDIAN:SIGMA:COUNT"),
    ("lognormal:0:1:3", "MEDIAN must be finite and > 0"),
    ("lognormal:100:nan:3", "SIGMA must be finite and >= 0"),
    ("normal:1:2", "unknown distribution 'normal'"),
])
def test_bad_specs_name_the_problem(text, why, capsys):
    with pytest.raises(ValueError, match="varlen must be N1,N2"):
        parse_lengths(text)
    with pytest.raises(SystemExit) as exc:
        main(["check", f"--varlen={text}"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and why in err and "Traceback" not in err


def test_a_draw_of_only_zeros_is_refused_with_exit_2(capsys):
    assert main(["check", "--varlen", "lognormal:0.01:0:3", "--no-backends"]) == 2
    assert "drew only lengths of 0 with seed 0" in capsys.readouterr().err


def run_check(capsys, *args):
    rc = main(["check", "--dtype", "fp32", "bf16", "--dist", "normal", "--quiet",
               "--shape", "1x2x64x16", "--causal", "on", *args])
    return rc, capsys.readouterr().out


def test_the_header_prints_the_lengths_drawn_and_the_seed_reproduces_them(capsys):
    rc, text = run_check(capsys, "--varlen", "uniform:0-40:4", "--seed", "7", "--no-backends")
    drawn = parse_lengths("uniform:0-40:4").draw(7)
    line = f"varlen uniform:0-40:4 with seed 7 drew 4 lengths: {','.join(map(str, drawn))}"
    assert rc == 0 and line in text.splitlines()[1]
    assert f"normal varlen {','.join(map(str, drawn))} H=2 d=16 causal" in text
    rc, text = run_check(capsys, "--varlen", "uniform:0-40:4", "--seed", "7", "--no-backends",
                         "--json")
    assert json.loads(text)["meta"]["varlen"] == {"spec": "uniform:0-40:4", "seed": 7,
                                                  "lengths": list(drawn)}
    _, text = run_check(capsys, "--varlen", "30,5", "--no-backends")
    assert "drew" not in text  # a list is printed in the case labels only


@pytest.mark.usefixtures("working_interpreter")
def test_the_check_judges_a_packed_batch_gradients_for_the_triton_kernel(capsys):
    """Tables 4 and 5 for a packed batch: streamed vs one-shot float64 gradients, and the
    flash model and the Triton varlen backward by the gradient rule; torch-naive (no packed
    path) not applicable."""
    rc, text = run_check(capsys, "--varlen", "40,0,17,1", "--window", "9,0", "--sinks",
                         "--backend", "triton", "--backend", "torch-naive", "--json")
    report = json.loads(text)
    label = "normal varlen 40,0,17,1 H=2 d=16 causal window=(9,0) sinks"
    assert rc == 0 and report["passed"] and report["grad_cases"] == [label]
    assert [r["what"] for r in report["grad_exactness"]] == ["dq", "dk", "dv", "dsinks"]
    assert all(r["rel"] <= 1e-12 for r in report["grad_exactness"])
    grads = {(r["kernel"], r["dtype"]): r for r in report["gradients"]}
    for dtype in ("fp32", "bf16"):
        assert grads["flash_model", dtype]["passed"] and grads["triton", dtype]["passed"]
        assert grads["triton", dtype]["dq_ratio"] < 3
        # the sinks' gradient, summed over the sequences, judged by the gradient rule
        dsinks = grads["triton", dtype]
        assert "dsinks" in grads["flash_model", dtype] and dsinks["dsinks_passed"]
        assert dsinks["dsinks"]["max_abs"] <= dsinks["dsinks_limit"]
    assert grads["torch-naive", "fp32"]["skipped"] == ("not applicable: its backward takes "
                                                       "no packed (varlen) batch")
    by_name = {(r["backend"], r["dtype"]): r for r in report["backends"]}
    assert by_name["torch-naive", "fp32"]["skipped"].startswith("not applicable")


def test_a_packed_batch_reaches_kernels_rounded_once(monkeypatch):
    """The kernel gets q, k, v rounded to fp16 by NumPy, the values the models and the band
    use (torch's float64 -> fp16 cast rounds through fp32: twice, an ulp off now and then)."""
    import dataclasses

    import torch

    from flashbench.backends import BACKENDS
    from flashbench.bands.measure import caller_inputs
    from flashbench.inputs import Shape
    from flashbench.measure.records import Case
    from flashbench.measure.varlen import measure_varlen, varlen_inputs

    seen = []

    def capture(q, k, v, cu_q, cu_k, **kw):
        seen.append([t.clone() for t in (q, k, v)])
        return BACKENDS["reference"].varlen(q.double(), k.double(), v.double(), cu_q, cu_k,
                                             **kw)

    monkeypatch.setitem(BACKENDS, "triton", dataclasses.replace(BACKENDS["triton"],
                                                                varlen=capture))
    case = Case(Shape(1, 2, 300, 300, 32), varlen=(300, 200))
    measure_varlen(case, ("fp16",), ("triton",), band_rule=False)
    (given,) = seen
    for t, x in zip(given, varlen_inputs(case)[:3], strict=True):
        want = torch.from_numpy(caller_inputs("fp16", x)).to(torch.float16)
        assert t.dtype == torch.float16 and torch.equal(t, want)


def test_a_packed_cases_label_names_its_kv_heads_and_value_dim():
    """`check --shape 1x4x1x192 --shape 1x4x1x192/128 --varlen 40,17` printed one label,
    "varlen 40,17 H=4 d=192", for both cases (a red team, 2026-12-06): a FAIL at dv = 128
    read as d = 192's, and table 3 grouped the two under one heading."""
    from flashbench.inputs import Shape
    from flashbench.measure.records import Case

    cases = [Case(Shape(2, 4, 40, 40, 192, **kw), varlen=(40, 17))
             for kw in ({}, {"dv": 128}, {"Hkv": 2}, {"dv": 128, "Hkv": 2})]
    labels = [c.label() for c in cases]
    assert labels[0] == "normal varlen 40,17 H=4 d=192"
    assert labels[3] == "normal varlen 40,17 H=4 Hkv=2 d=192 dv=128"
    assert len(set(labels)) == 4
