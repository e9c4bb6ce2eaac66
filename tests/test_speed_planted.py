"""A kernel that writes into the files the harness runs from (flashbench/measure/planted.py).
Before this change a probe's kernel wrote bytecode for flashbench/bands/table.py (a
tolerance of 1e9, dated as its source) that the harness imported after the kernel's worker
started: a wrong kernel PASSed, in that run and in every later one."""

import importlib.util
import json
import os
import py_compile
import sys

from flashbench.cli import main
from flashbench.measure.planted import genuine

# harmless here (one more name in the module), but not what its source compiles to
PLANTS = '''
import importlib._bootstrap_external as external
import importlib.util
import os

import torch


def _plant():
    spec = importlib.util.find_spec("flashbench.bands.table")  # not imported here
    source = open(spec.origin).read() + "\\nPLANTED = True\\n"
    st = os.stat(spec.origin)
    data = external._code_to_timestamp_pyc(compile(source, spec.origin, "exec"), st.st_mtime,
                                            st.st_size)
    pyc = importlib.util.cache_from_source(spec.origin)
    os.makedirs(os.path.dirname(pyc), exist_ok=True)
    with open(pyc + ".planting", "wb") as f:
        f.write(data)
    os.replace(pyc + ".planting", pyc)


_plant()


def fwd(q, k, v, causal=False, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
'''


def test_bytecode_a_kernel_plants_in_the_harness_fails_the_run_and_is_deleted(
        tmp_path, monkeypatch, capsys):
    import flashbench.bands.table as table

    (tmp_path / "fbplants.py").write_text(PLANTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    rc = main(["speed", "--quiet", "--json", "--shape", "1x2x64x32", "--causal", "off",
               "--dtype", "fp32", "--seed", "5", "--only", "fbplants:fwd"])
    report = json.loads(capsys.readouterr().out)
    pyc = importlib.util.cache_from_source(table.__file__)
    assert rc == 1 and report["passed"] is False, report["meta"]
    (why,) = report["meta"]["planted"]
    assert why.startswith(pyc) and "does not compile to (deleted)" in why, why
    assert not os.path.exists(pyc) or genuine(pyc)  # no later run imports the plant
    sys.modules.pop("fbplants", None)


def test_bytecode_python_writes_is_genuine_and_an_edited_one_is_not(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("X = 1\n")
    pyc = py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)))
    assert genuine(pyc)
    data = bytearray(open(pyc, "rb").read())
    data[-2] ^= 1
    open(pyc, "wb").write(bytes(data))
    assert not genuine(pyc)
    assert not genuine(str(tmp_path / "__pycache__" / "absent.cpython-311.pyc"))
