"""studies/review_power.py's scoring: the table it prints from saved reviews (the study's own
test, beside it: nothing in tests/ imports a study)."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _power():
    from studies import review_power

    return review_power


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


def test_summarize_keeps_each_timing_process_apart(tmp_path, capsys):
    """--processes request one: a size's reviews under each process are scored apart."""
    power = _power()
    streamed = "impl='streamed'"
    _save(tmp_path, "1.3x@request-1.json", [_row("TimeAttention", streamed, "slower", 1.3)],
          100)
    _save(tmp_path, "1.3x@one-1.json", [_row("TimeAttention", streamed, "same", 1.05)], 90)
    _save(tmp_path, "no-op@one-1.json", [_row("TimeAttention", streamed, "slower", 1.2)], 90)
    assert power.main(["--summarize", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {c[1]: c for c in ([x.strip() for x in line.split("|")] for line in out.splitlines()
                              if line.startswith("| "))}
    assert rows["1.3x @request"][3] == "1/1" and rows["1.3x @one"][3] == "0/1"
    assert rows["no-op @one"][4] == "1/1"
    assert "- no-op @one: 1/1 reviews with a 'slower' verdict" in out
    assert "- 1.3x @request: detected in 1/1" in out


def test_the_slowdown_edits_still_find_the_streaming_loop():
    """review_power.py and the slow review tests slow stream_attention by editing its loop:
    a change of that loop must fail here, in the fast tests, not after a study started."""
    import ast

    power = _power()
    source = (ROOT / "flashbench" / "reference" / "streaming.py").read_text()
    ast.parse(power.slowed(source, 1.5))  # the edited module still parses
    review_tests = (ROOT / "tests" / "test_review.py").read_text()
    marker = ast.literal_eval(review_tests.split("\nMARKER = ", 1)[1].split("\n", 1)[0])
    slow = ast.literal_eval(review_tests.split("\nSLOW = ", 1)[1].split("\n'''", 1)[0] + "\n'''")
    assert source.count(marker) == 1
    ast.parse(source.replace(marker, slow + marker, 1))
