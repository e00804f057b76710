"""tools/bench/report.py turns the benchmark's JSON into docs/performance.md's tables the same way
every time (a fixture in tests/data/bench; nothing here times anything)."""
import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "bench")


def _report():
    spec = importlib.util.spec_from_file_location("bench_report", os.path.join(ROOT, "tools", "bench", "report.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sample():
    with open(os.path.join(DATA, "sample.json")) as f:
        return json.load(f)


def test_sample_gives_the_recorded_tables():
    report = _report()
    with open(os.path.join(DATA, "sample_table.md")) as f:
        expected = f.read()
    assert report.tables([("sample.json", _sample())]) == expected
    assert report.tables([("sample.json", _sample())]) == expected   # no state carried between calls


def test_ratios_are_medians_with_the_range_of_the_passes():
    report = _report()
    passes = _sample()["workloads"]["W1"]["passes"]["quiet"]
    assert report.fmt_ratio(report.ratios(passes, "gcompile", "torch")) == "1.00 (0.80–1.10)"
    assert report.fmt_ratio(report.ratios(passes, "gcompile", "missing")) == "—"
    assert report.fmt_ratio([0.5]) == "0.50"


def test_write_replaces_only_the_marked_section(tmp_path):
    report = _report()
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n\nbefore\n{report.BEGIN}\nold table\n{report.END}\nafter\n")
    sample = tmp_path / "sample.json"
    sample.write_text(json.dumps(_sample()))
    assert report.main([str(sample), "--write", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Title\n\nbefore\n" + report.BEGIN + "\n<!-- generated")
    assert "old table" not in text and text.endswith(report.END + "\nafter\n")
    assert "| W1 mlp-step | 21.0 | 1.00 (0.80–1.10) |" in text
    first = text
    report.main([str(sample), "--write", str(page)])
    assert page.read_text() == first


def test_a_page_without_markers_is_an_error():
    with pytest.raises(ValueError, match="bench-table"):
        _report().replace_section("no markers here", "table")


def _zoo_sample():
    with open(os.path.join(DATA, "zoo_sample.json")) as f:
        return json.load(f)


def test_the_zoo_sample_gives_the_recorded_table():
    with open(os.path.join(DATA, "zoo_sample_table.md")) as f:
        expected = f.read()
    assert _report().zoo_tables([("zoo_sample.json", _zoo_sample())]) == expected


def test_write_replaces_the_zoo_section_and_the_bench_section_each_from_its_runs(tmp_path):
    report = _report()
    page = tmp_path / "page.md"
    page.write_text(f"# Title\n{report.BEGIN}\nold table\n{report.END}\nbetween\n{report.ZOO_BEGIN}\nold zoo\n"
                    f"{report.ZOO_END}\nafter\n")
    sample, zoo = tmp_path / "sample.json", tmp_path / "zoo_sample.json"
    sample.write_text(json.dumps(_sample()))
    zoo.write_text(json.dumps(_zoo_sample()))
    assert report.main([str(zoo), "--write", str(page)]) == 0      # the zoo's run: its section only
    text = page.read_text()
    assert "old table" in text and "old zoo" not in text
    assert "| resnet50 ResNet-50 | batch 8, 224² | 25.6M | 1850.0 | 0.98 (0.90–1.06) |" in text
    assert report.main([str(sample), str(zoo), "--write", str(page)]) == 0
    text = page.read_text()
    assert "old table" not in text and text.endswith(report.ZOO_END + "\nafter\n")
    assert "| W1 mlp-step | 21.0 | 1.00 (0.80–1.10) |" in text and "| gpt2 GPT-2 small | small | 65,536 |" in text
    with pytest.raises(ValueError, match="zoo-table"):
        report.replace_section("no markers", "table", report.ZOO_BEGIN, report.ZOO_END)


def test_a_memory_only_zoo_run_says_so_and_has_no_time_columns():
    run = _zoo_sample()
    run["settings"]["memory_only"] = True
    for row in run["zoo"].values():
        row["passes"], row["build_s"], row["grad_error"] = {}, None, None
    text = _report().zoo_tables([("zoo_memory.json", run)])
    assert "Peak memory only (--memory-only): nothing timed." in text and "timed calls" not in text
    head = next(line for line in text.splitlines() if line.startswith("| model"))
    assert "× PyTorch (quiet)" not in head and "× PyTorch (busy neighbour)" not in head
    assert "| resnet50 ResNet-50 | batch 8, 224² | 25.6M | — |" in text


def test_a_model_in_several_runs_takes_its_row_from_the_last():
    older, newer = _zoo_sample(), _zoo_sample()
    key = next(iter(newer["zoo"]))
    newer["zoo"] = {key: newer["zoo"][key]}
    newer["zoo"][key]["passes"]["quiet"] = [{"gcompile": 500.0, "torch": 1000.0}]
    table = _report().zoo_tables([("older.json", older), ("newer.json", newer)])
    rows = [line for line in table.splitlines() if line.startswith(f"| {key} ")]
    assert len(rows) == 1 and "| newer.json |" in rows[0] and "| 500.0 | 0.50 |" in rows[0]
    others = [line for line in table.splitlines() if line.startswith("| ") and "| older.json |" in line]
    assert len(others) == len(older["zoo"]) - 1
    assert "| run |" in next(line for line in table.splitlines() if line.startswith("| model"))


def test_a_memory_only_run_after_a_timed_one_keeps_the_times_and_gives_the_memory():
    timed, memory = _zoo_sample(), _zoo_sample()
    memory["settings"]["memory_only"] = True
    key = next(iter(memory["zoo"]))
    memory["zoo"] = {key: memory["zoo"][key]}
    row = memory["zoo"][key]
    row["passes"], row["build_s"], row["grad_error"] = {}, None, None
    row["memory"]["gcompile"]["peak_mb"] = row["memory"]["torch"]["peak_mb"] / 4
    table = _report().zoo_tables([("timed.json", timed), ("memory.json", memory)])
    line = next(line for line in table.splitlines() if line.startswith(f"| {key} "))
    old = _report().zoo_tables([("timed.json", _zoo_sample())])
    old_line = next(line for line in old.splitlines() if line.startswith(f"| {key} "))
    cells, old_cells = line.split(" | "), old_line.split(" | ")
    assert cells[1] == "timed.json (memory: memory.json)"
    assert cells[3:6] == old_cells[2:5]                 # parameters, time and its ratios from the timed run
    assert "| 0.25 |" in line and "| 0.25 |" not in old_line
    assert cells[-1] == old_cells[-1]                   # (the budget's time over the default's, timed)
    assert len(cells) == len(old_cells) + 1             # (the run column)


def test_what_compiling_keeps_leaves_out_the_callers_batch_where_recorded():
    run = _zoo_sample()
    key = next(iter(run["zoo"]))
    run["zoo"][key]["memory"]["gcompile"]["inputs_mb"] = 37.0
    line = next(line for line in _report().zoo_tables([("run.json", run)]).splitlines() if line.startswith(f"| {key} "))
    # 290.4 ready - 56.0 imported - 97.5 weights = 137 kept, less the batch's 37
    assert "| 290 | 100 (1.02×) |" in line
