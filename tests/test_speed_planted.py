"""A kernel that writes into the files the harness runs from (flashbench/measure/planted.py).
Before this change a probe's kernel wrote bytecode for flashbench/bands/table.py (a
tolerance of 1e9, dated as its source) that the harness imported after the kernel's worker
started: a wrong kernel PASSed, in that run and in every later one."""

import importlib.util
import json
import os
import py_compile
import sys

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


def test_bytecode_a_kernel_plants_in_the_harness_fails_the_run_and_is_deleted(tmp_path):
    """Run on a private copy of the package (a plant in the shared tree would be seen, and
    deleted, by every other speed run at the same time: the tests' parallel ones too)."""
    import shutil
    import subprocess
    from pathlib import Path

    import flashbench

    copy = tmp_path / "harness"
    shutil.copytree(Path(flashbench.__file__).parent, copy / "flashbench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "fbplants.py").write_text(PLANTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy), str(tmp_path)])}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    r = subprocess.run([sys.executable, "-m", "flashbench.cli", "speed", "--quiet", "--json",
                        "--shape", "1x2x64x32", "--causal", "off", "--dtype", "fp32", "--seed",
                        "5", "--only", "fbplants:fwd"], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    report = json.loads(r.stdout)
    source = copy / "flashbench" / "bands" / "table.py"
    pyc = importlib.util.cache_from_source(str(source))
    assert r.returncode == 1 and report["passed"] is False, (report["meta"], r.stderr[-2000:])
    (why,) = report["meta"]["planted"]
    assert why.startswith(pyc) and "does not compile to (deleted)" in why, why
    assert not os.path.exists(pyc) or genuine(pyc)  # no later run imports the plant
    assert [row["status"] for row in report["rows"]] == ["PASS"]  # its values are right


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


def test_bytecode_removed_during_a_run_is_named(tmp_path):
    """Python replaces bytecode, never removes it: a removal is a kernel's, or another run's
    deletion of a plant (two runs at once share the package: the one that planted still
    fails)."""
    from flashbench.measure.planted import planted, snapshot

    source = tmp_path / "gone.py"
    source.write_text("X = 1\n")
    pyc = py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)))
    before = {**snapshot(), pyc: (1, 2, 3, 4)}  # present when the run began
    assert planted({**snapshot(), pyc: None}) == []  # a bytecode file Python wrote meanwhile
    os.remove(pyc)
    (why,) = planted(before)
    assert why.startswith(pyc) and "removed during the run" in why


def test_bytecode_python_writes_is_genuine_to_a_harness_run_with_optimisations(tmp_path):
    """A plain .pyc is optimisation level 0 whatever the harness's own -O (a harness under
    -O called its workers' bytecode of a module with an assert a plant, and deleted it)."""
    import subprocess

    source = tmp_path / "asserts.py"
    source.write_text("def f(x):\n    assert x\n    return x\n")
    pyc = py_compile.compile(str(source), cfile=importlib.util.cache_from_source(str(source)))
    r = subprocess.run([sys.executable, "-O", "-c", "import sys; from flashbench.measure."
                        "planted import genuine; print(genuine(sys.argv[1]))", pyc],
                       capture_output=True, text=True, timeout=120)
    assert r.stdout.strip() == "True", r.stderr[-2000:]


HOOK = '''
import os

import torch

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sitecustomize.py"),
          "w") as f:
    f.write("PLANTED = True\\n")  # harmless here; a probe's dropped every value check


def fwd(q, k, v, causal=False, scale=None):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
'''


def test_a_startup_hook_a_kernel_writes_on_the_import_path_fails_that_run_and_the_next(
        tmp_path):
    """A probe's kernel (2026-12-05) wrote ``sitecustomize.py`` beside itself, on the
    harness's PYTHONPATH: every later ``flashbench speed`` imported it at start-up, before
    flashbench, and its hook made the harness judge nothing (a kernel returning zeros
    PASSed). The run that writes it fails by name, and so does every run that starts with
    it (the file is the user's to delete)."""
    import subprocess

    (tmp_path / "fbhook.py").write_text(HOOK)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*sys.path, str(tmp_path)])}

    def run():
        r = subprocess.run([sys.executable, "-m", "flashbench.cli", "speed", "--quiet",
                            "--json", "--shape", "1x2x64x32", "--dtype", "fp32", "--seed", "5",
                            "--only", "fbhook:fwd"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
        return r.returncode, json.loads(r.stdout)

    rc, report = run()
    hook = str(tmp_path / "sitecustomize.py")
    assert rc == 1 and report["meta"]["planted"] == [f"{hook}: written during the run"], \
        report["meta"]
    rc, report = run()
    why = report["meta"]["planted"]
    assert rc == 1 and why[0].startswith(f"{hook}: sitecustomize imported at this run's start"), why
