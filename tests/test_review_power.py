"""scripts/review_power.py's scoring: the table it prints from saved reviews."""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _power():
    spec = importlib.util.spec_from_file_location("review_power", ROOT / "scripts" /
                                                  "review_power.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["review_power"] = mod
    spec.loader.exec_module(mod)
    return mod


def _row(name, params, verdict, ratio=1.0):
    return {"kind": "time", "benchmark": f"bench_reference.{name}.time_x", "params": params,
            "verdict": verdict, "ratio": ratio}


def _save(folder, name, rows, wall):
    (folder / name).write_text(json.dumps({"rows": rows, "status": 0, "seconds": wall - 5,
                                           "power_wall_s": wall}))


def test_summarize_scores_saved_reviews_and_skips_what_is_not_one(tmp_path, capsys):
    power = _power()
    streamed = "impl='streamed'"
    _save(tmp_path, "no-op-1.json", [_row("TimeAttention", streamed, "same"),
                                     _row("TimeAttention", "impl='one-shot'", "ambiguous"),
                                     _row("TimeAttentionGPU", "", "not compared")], 290)
    _save(tmp_path, "1.3x-1.json", [_row("TimeAttention", streamed, "slower", 1.31),
                                    _row("TimeAttention", "impl='one-shot'", "same")], 280)
    _save(tmp_path, "1.3x-2.json", [_row("TimeAttention", streamed, "ambiguous", 1.29),
                                    _row("TimeAttention", "impl='one-shot'", "slower", 1.2)],
          300)
    (tmp_path / "1.3x-3.json").write_text("{not json")
    (tmp_path / "notes.json").write_text("{}")  # not a saved review's name: ignored
    assert power.main(["--summarize", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "skipped" in err and "1.3x-3.json" in err
    lines = {line.split("|")[1].strip(): line for line in out.splitlines()
             if line.startswith("| no-op") or line.startswith("| 1.3x")}
    # no-op: 1 of 2 compared rows ambiguous (the GPU row is not compared), no false alarm
    assert lines["no-op"].split("|")[4].strip() == "0/1"
    assert lines["no-op"].split("|")[5].strip() == "50%"
    # 1.3x: detected once of two; the one-shot "slower" is a false alarm
    cells = [c.strip() for c in lines["1.3x"].split("|")]
    assert cells[2:6] == ["2", "1/2", "1/2", "25%"]
    assert cells[8] == "290 / 300"
    assert power.main(["--summarize", str(tmp_path / "empty")]) == 2
