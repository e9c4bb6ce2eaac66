"""Where flashbench's Triton kernels run, what they accept, and how the kernel modules are
put together: FLASHBENCH_TRITON_INTERPRET, the causal flag on the torch side, the
key-block phases shared by the forward and the backward, the operand widths of the
launch configs, and module hygiene (no name bound twice, no reads of another module's
private names)."""

import ast
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import triton.language as tl
from hypothesis import given
from hypothesis import strategies as st

import flashbench
from flashbench.inputs.precision import DTYPES, PRECISIONS
from flashbench.kernels import configs, torch_peers, triton_backward, triton_forward, triton_fp8
from flashbench.kernels.launch import (
    ENV_FORCE,
    Config,
    TritonKernel,
    default_interpreted,
    interpreted_for,
)
from flashbench.kernels.phases import key_phases
from flashbench.kernels.validate import validate_tensors

ROOT = Path(__file__).resolve().parent.parent


def small(d=32, device="cpu", dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, 2, 8, d, generator=g).to(device, dtype) for _ in range(3))


# ---------------------------------------------------------------- FLASHBENCH_TRITON_INTERPRET

def test_interpret_1_forces_the_interpreter_for_cuda_tensors_too(monkeypatch):
    monkeypatch.setenv(ENV_FORCE, "1")
    assert interpreted_for(torch.device("cuda")) is True
    assert interpreted_for(torch.device("cpu")) is True
    assert interpreted_for(torch.device("meta")) is False  # planning never runs anything
    assert default_interpreted() is True


def test_interpret_0_refuses_the_interpreter_with_a_clear_error(monkeypatch):
    monkeypatch.setenv(ENV_FORCE, "0")
    assert interpreted_for(torch.device("cuda")) is False  # compiled, as without the variable
    assert interpreted_for(torch.device("meta")) is False
    with pytest.raises(ValueError, match=f"{ENV_FORCE}=0 refuses the Triton interpreter, "
                                         "and tensors on cpu run only under"):
        interpreted_for(torch.device("cpu"))
    q, k, v = small()
    for call in (lambda: flashbench.triton_attention(q, k, v),
                 lambda: triton_forward.forward(q, k, v, config="fixed"),
                 lambda: triton_fp8.triton_attention_fp8(q, k, v)):
        with pytest.raises(ValueError, match=f"{ENV_FORCE}=0 refuses"):
            call()
    # a process started with TRITON_INTERPRET=1 interprets CUDA launches too: refused as well
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        interpreted_for(torch.device("cuda"))


def test_interpret_takes_only_0_or_1(monkeypatch):
    monkeypatch.setenv(ENV_FORCE, "yes")
    with pytest.raises(ValueError, match=f"{ENV_FORCE} must be 0 or 1, got 'yes'"):
        interpreted_for(torch.device("cpu"))


@pytest.mark.parametrize("value", ["", "0", "1"])
def test_a_cpu_only_machine_says_it_interprets(monkeypatch, value):
    """A machine without a CUDA GPU has only CPU tensors: every launch there is interpreted
    (or, with =0, refused), never compiled, so default_interpreted() says True."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(ENV_FORCE, value)
    assert default_interpreted() is True


def test_backend_and_measure_say_interpreted_on_a_cpu_only_machine_with_interpret_0():
    """A fresh process, GPUs hidden, FLASHBENCH_TRITON_INTERPRET=0 before import: the
    Triton backends report interpreted runs, big shapes are 'too slow for the interpreter',
    and a call is refused (the backend is unavailable, with the reason) rather than
    running interpreted."""
    code = textwrap.dedent("""
        import torch
        from flashbench.backends import get_backend
        from flashbench.inputs import Shape
        from flashbench.kernels import triton_forward
        from flashbench.kernels.validate import BackendUnavailable
        from flashbench.measure.records import interpreter_too_slow
        assert not torch.cuda.is_available()
        assert triton_forward.INTERPRET is True
        big = Shape(1, 32, 4096, 4096, 128)
        for name in ("triton", "triton-fp8"):
            b = get_backend(name)
            assert b.interpreted() is True, name
            assert interpreter_too_slow(b, big), name
        q = torch.randn(1, 2, 8, 32)
        try:
            get_backend("triton")(q, q, q)
        except BackendUnavailable as exc:
            assert "FLASHBENCH_TRITON_INTERPRET=0 refuses" in str(exc), exc
        else:
            raise AssertionError("an interpreted launch ran with FLASHBENCH_TRITON_INTERPRET=0")
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update({ENV_FORCE: "0", "CUDA_VISIBLE_DEVICES": ""})
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "ok"


# ---------------------------------------------------------------- causal on the torch side

def _fp8_inputs(q, k, v):
    (q8, qd), (k8, kd), (v8, vd) = (triton_fp8.quantize(t) for t in (q, k, v))
    return q8, k8, v8, qd, kd, vd


def _backward(q, k, v, causal):
    o = torch.zeros_like(q)
    lse = torch.zeros(q.shape[:-1])
    return triton_backward.backward(q, k, v, o, lse, torch.zeros_like(q), causal=causal)


TORCH_ENTRY_POINTS = {
    "validate_tensors": lambda q, k, v, c: validate_tensors(q, k, v, causal=c),
    "triton_attention": lambda q, k, v, c: flashbench.triton_attention(q, k, v, causal=c),
    "attention_function": lambda q, k, v, c: triton_backward.attention_function(q, k, v, causal=c),
    "forward": lambda q, k, v, c: triton_forward.forward(q, k, v, causal=c),
    "launch": lambda q, k, v, c: triton_forward.launch(q, k, v, torch.empty_like(q), 1.0, c,
                                                   None, tiles=(16, 16)),
    "backward": _backward,
    "triton_attention_fp8": lambda q, k, v, c: triton_fp8.triton_attention_fp8(q, k, v,
                                                                               causal=c),
    "forward_fp8": lambda q, k, v, c: triton_fp8.forward_fp8(*_fp8_inputs(q, k, v), causal=c),
    "naive_attention": lambda q, k, v, c: torch_peers.naive_attention(q, k, v, causal=c),
    "naive_output": lambda q, k, v, c: torch_peers.naive_output(q, k, v, causal=c),
    "sdpa_attention": lambda q, k, v, c: torch_peers.sdpa_attention(q, k, v, causal=c),
    "sdpa_output": lambda q, k, v, c: torch_peers.sdpa_output(q, k, v, causal=c),
    "flex_attention_lse": lambda q, k, v, c: torch_peers.flex_attention_lse(q, k, v, causal=c),
    "flex_output": lambda q, k, v, c: torch_peers.flex_output(q, k, v, causal=c),
    "reference_lse": lambda q, k, v, c: torch_peers.reference_lse(q, k, v, causal=c),
}


@pytest.mark.parametrize("name", sorted(TORCH_ENTRY_POINTS))
@pytest.mark.parametrize("bad", ["False", 0, 1, None, torch.tensor(True)],
                         ids=["str", "0", "1", "None", "tensor"])
def test_torch_entry_points_refuse_a_causal_that_is_not_a_bool(name, bad):
    """``causal="False"`` is a non-empty string: taken as truthy it applied the mask."""
    q, k, v = small()
    with pytest.raises(TypeError, match=r"causal must be True or False \(a bool\), got"):
        TORCH_ENTRY_POINTS[name](q, k, v, bad)


def test_a_numpy_bool_causal_is_a_bool(device):
    q, k, v = small(device=device)
    o, lse = flashbench.triton_attention(q, k, v, causal=np.bool_(True))
    o2, lse2 = flashbench.triton_attention(q, k, v, causal=True)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)


# ---------------------------------------------------------------- the key-block phases

def _phases_kernel(OUT, N_Q, N_K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    causal_offset, full, hi = key_phases(start_m, N_Q, N_K, BLOCK_M, BLOCK_N, CAUSAL)
    tl.store(OUT + start_m * 3, causal_offset)
    tl.store(OUT + start_m * 3 + 1, full)
    tl.store(OUT + start_m * 3 + 2, hi)


PHASES = TritonKernel(_phases_kernel, name="phases")


@given(nq=st.integers(1, 200), nk=st.integers(1, 200), bm=st.sampled_from([16, 32, 64]),
       bn=st.sampled_from([16, 32, 64]), causal=st.booleans())
def test_key_phases_cover_exactly_the_visible_keys(nq, nk, bm, bn, causal):
    """For every query block (interpreted): keys [0, full) are seen by every row of the block
    (no mask needed), full is the last block edge where that holds, keys from hi on are seen
    by no row, and key hi - 1 by some row (nothing visible is skipped, nothing needless
    loaded): the bottom-right causal rule, query i sees key j iff j <= i + Nk - Nq."""
    blocks = -(-nq // bm)
    out = torch.full((blocks, 3), -7, dtype=torch.int32)
    PHASES.launch(lambda meta: (blocks,), (out, nq, nk), dict(CAUSAL=causal), device="cpu",
                  config=Config.of(BLOCK_M=bm, BLOCK_N=bn))
    keys = np.arange(nk)
    for m, (offset, full, hi) in enumerate(out.tolist()):
        rows = np.arange(m * bm, (m + 1) * bm)
        seen = (keys[None, :] <= rows[:, None] + nk - nq) if causal else np.ones((bm, nk), bool)
        assert offset == nk - nq
        assert full % bn == 0 and 0 <= full <= hi <= nk
        assert seen[:, :full].all()
        assert full + bn > nk or not seen[:, full:full + bn].all()
        assert not seen[:, hi:].any()
        assert hi == 0 or seen[:, hi - 1].any()


# ---------------------------------------------------------------- operand widths

@pytest.mark.parametrize("name", DTYPES)
def test_config_widths_come_from_the_precision_registry(name):
    """Shared-memory sizes use the storage item size the registry gives each precision,
    by name and by torch dtype (fp64 and fp8_e5m2 included: no second name table)."""
    prec = PRECISIONS[name]
    width = np.dtype(prec.storage).itemsize
    cfg = Config.of(num_warps=4, num_stages=3, BLOCK_M=128, BLOCK_N=64)
    want = width * 64 * (128 + 2 * 64 * 3)
    assert configs.forward_smem_bytes(cfg, 64, name) == want
    if prec.torch_name is not None:
        assert configs.forward_smem_bytes(cfg, 64, getattr(torch, prec.torch_name)) == want
    if width not in (1, 2, 4):
        with pytest.raises(ValueError, match=f"got .*{width} bytes"):
            configs.candidates(64, name)


def test_config_widths_refuse_unknown_dtypes():
    with pytest.raises(ValueError, match="none of flashbench's precisions"):
        configs.fixed_config(64, torch.int8)


# ---------------------------------------------------------------- module hygiene

def _my_modules():
    pkg = ROOT / "flashbench"
    return (sorted((pkg / "kernels").glob("*.py")) + sorted((pkg / "numerics").glob("*.py"))
            + [pkg / "inputs" / "validation.py"] + sorted((pkg / "reference").glob("*.py")))


@pytest.mark.parametrize("path", _my_modules(), ids=lambda p: p.name)
def test_module_binds_each_top_level_name_once(path):
    """A second ``_GONE = object()`` further down silently replaced the first (finding 18)."""
    seen, twice = set(), []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        else:
            continue
        twice += [n for n in names if n in seen]
        seen.update(names)
    assert not twice, f"{path.name} binds {twice} more than once at top level"


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@pytest.mark.parametrize("path", _my_modules(), ids=lambda p: p.name)
def test_module_reads_no_private_name_of_another_flashbench_module(path):
    """Shared names are public (finding 19: triton_fp8 read triton_forward._DEFAULT_CONFIG and
    triton_forward._check_heads)."""
    tree = ast.parse(path.read_text())
    modules, private = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flashbench"):
            for alias in node.names:
                if alias.name.startswith("_"):
                    private.append(f"{node.module}.{alias.name}")
                elif _is_module(f"{node.module}.{alias.name}"):
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules.update(a.asname for a in node.names
                           if a.name.startswith("flashbench") and a.asname)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules and node.attr.startswith("_")
                and not node.attr.startswith("__")):
            private.append(f"{node.value.id}.{node.attr}")
    assert not private, f"{path.name} reads private names {private}"


def test_the_interpreter_skips_only_the_overflow_checks_it_would_drop(monkeypatch):
    """An interpreted launch turns Triton's interpreter's sanitize_overflow off while debug
    is off (the check's assert would never run): the same bits as a launch that computed
    the checks (counted), about a third less time; with debug on it stays."""
    import dataclasses

    from triton.language import semantic
    from triton.runtime import interpreter as ti

    from flashbench.kernels.attention import triton_attention
    from flashbench.kernels.interpreter import skip_discarded_overflow_checks

    builder, computed = ti.interpreter_builder, []
    impl = semantic.TritonSemantic.binary_op_sanitize_overflow_impl

    def counted(self, lhs, rhs, op):
        computed.append(bool(self.builder.options.sanitize_overflow))
        return impl(self, lhs, rhs, op)

    monkeypatch.setattr(semantic.TritonSemantic, "binary_op_sanitize_overflow_impl", counted)
    before = builder.options
    q, k, v = (torch.randn(1, 2, 70, 16, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    try:
        triton_attention(q, k, v, causal=True)  # the interpreted twins exist from here on
        builder.options = dataclasses.replace(before, sanitize_overflow=True, debug=False)
        computed.clear()
        checked = triton_attention(q, k, v, causal=True)
        assert computed and all(computed)  # the checks were computed in this launch ...
        skip_discarded_overflow_checks()
        assert builder.options.sanitize_overflow is False
        computed.clear()
        fast = triton_attention(q, k, v, causal=True)  # ... and not in this one:
        assert not any(computed)  # the same bits
        assert all(torch.equal(a, b) for a, b in zip(fast, checked, strict=True))
        builder.options = dataclasses.replace(before, sanitize_overflow=True, debug=True)
        skip_discarded_overflow_checks()
        assert builder.options.sanitize_overflow is True  # its asserts would run: kept
    finally:
        builder.options = before


def test_an_interpreted_helper_patches_triton_language_once_a_launch(monkeypatch,
                                                                      working_interpreter):
    """Triton's interpreted twin of a jitted helper (tl.max, tl.sum, the kernels' own)
    patches triton.language on every call, nothing of it undone within the launch; a
    launch patches it once a function and runs the later calls directly (half the
    interpreted forward's time): the same bits as patching on every call."""
    from triton.runtime import interpreter as ti

    from flashbench.kernels import interpreter

    patched, patch = [], ti._patch_lang
    monkeypatch.setattr(ti, "_patch_lang", lambda fn: patched.append(fn) or patch(fn))
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 70, 16, generator=g) for _ in range(3))
    tiles = Config.of(BLOCK_M=16, BLOCK_N=16)
    once = triton_forward.forward(q, k, v, causal=True, config=tiles)[:2]
    assert len(patched) > 1 and len(patched) == len(set(patched))  # the launch + helpers

    class Never(set):  # the memo of patched helpers forgets: Triton's own every-call patch
        def __contains__(self, fn):
            return False

    monkeypatch.setattr(interpreter, "_PATCHED_FOR", Never())
    patched.clear()
    every = triton_forward.forward(q, k, v, causal=True, config=tiles)[:2]
    assert len(patched) > 5 * len(set(patched))  # helpers called once a key block or more
    assert all(torch.equal(a, b) for a, b in zip(once, every, strict=True))
