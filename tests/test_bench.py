"""The pure helpers of bench/: timing summaries, FLOP formulas, tables, goals, the results file.

    PYTHONPATH=. python -m pytest -q tests/test_bench.py

Fast (no TensorFlow op, no torch): the benchmarks themselves are run by hand (bench/README.md).
"""

from __future__ import annotations

import os
import sys
import types

import pytest

np = pytest.importorskip("numpy")

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import common  # noqa: E402

# === Timing ===


def test_summary_median_and_spread():
    t = common.summarize([0.5, 0.1, 0.3, 0.2, 0.4])
    assert t.n == 5
    assert t.median == pytest.approx(0.3)
    assert (t.min, t.max) == (pytest.approx(0.1), pytest.approx(0.5))
    assert t.iqr == (pytest.approx(0.2), pytest.approx(0.4))
    assert t.percentile(90) == pytest.approx(0.46)
    assert t.spread(1000, 0) == "100-500"
    assert t.rate_spread(1.0, 1) == "2.0-10.0"  # slowest repeat gives the low rate


def test_summary_even_count_and_bad_input():
    assert common.summarize([1.0, 2.0, 3.0, 4.0]).median == pytest.approx(2.5)
    with pytest.raises(ValueError):
        common.summarize([])
    with pytest.raises(ValueError):
        common.summarize([1.0, float("nan")])


def test_time_repeats_runs_warmup_then_repeats_with_fresh_setup():
    calls, setups = [], []

    def setup():
        setups.append(len(setups))
        return f"state{len(setups)}"

    t = common.time_repeats(calls.append, repeats=5, warmup=2, setup=setup)
    assert t.n == 5
    assert calls == [f"state{i}" for i in range(1, 8)]  # each run got its own fresh state
    assert all(s >= 0 for s in t.seconds)


def test_ms_cell_picks_digits():
    assert common.ms_cell(common.summarize([0.0012, 0.0013, 0.0014])) == "1.30 (1.20-1.40)"
    assert common.ms_cell(common.summarize([0.25, 0.5, 0.75])) == "500 (250-750)"


# === FLOP formulas ===


def test_matmul_flops():
    assert common.matmul_flops(2, 3, 4) == 48


def test_encoder_layer_flops_hand_computed():
    # T=2, H=4, I=8: 2*2*(4*16 + 2*4*8) + 2*2*2*2*4 = 512 + 64
    assert common.encoder_layer_flops(2, 4, 8) == 576


def test_encoder_layer_flops_counts_every_matmul():
    t, h, i, heads = 3, 4, 8, 2
    d = h // heads
    mm = common.matmul_flops
    expected = (
        4 * mm(t, h, h)  # Q, K, V, output projections
        + mm(t, i, h)
        + mm(t, h, i)  # feed-forward up and down
        + heads * mm(t, t, d)  # scores, per head (T x d) @ (d x T)
        + heads * mm(t, d, t)
    )  # probabilities @ values
    assert common.encoder_layer_flops(t, h, i) == expected


def test_encoder_and_pretraining_flops():
    config = types.SimpleNamespace(
        num_layers=3, hidden_dim=4, intermediate_dim=8, vocabulary_size=10
    )
    assert common.encoder_flops(config, batch=5, tokens=2) == 5 * 3 * 576
    assert common.encoder_flops(config, 5, 2, pooler=True) == 5 * (3 * 576 + 2 * 16)
    # MLM head at 2 positions: 2*2*(16 + 40); NSP: 2*4*2
    heads = 2 * 2 * (16 + 4 * 10) + 2 * 4 * 2
    assert common.pretraining_forward_flops(config, 5, 2, masked=2) == 5 * (3 * 576 + 32 + heads)
    assert common.training_flops(100) == 300


def test_minilm_flops_per_sequence():
    config = types.SimpleNamespace(num_layers=6, hidden_dim=384, intermediate_dim=1536)
    # the figure the encoder benchmark's docstring quotes: 2.9 GFLOP at 128 tokens
    assert common.encoder_flops(config, 1, 128) / 1e9 == pytest.approx(2.9, abs=0.05)


# === Tables and goals ===


def test_table():
    text = common.table(["a", "b"], [[1, None], ["x|y"]])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | - |", "| x\\|y | - |"]


def test_goal_line_met_not_met_and_not_measured():
    assert common.goal_line("speed", 3.2, 3.0, "x").startswith("- goal speed: met (measured 3.2 x")
    assert "not met (measured 2.9 x vs target >= 3 x)" in common.goal_line("speed", 2.9, 3, "x")
    assert "met (measured 3.4 ms vs target <= 3.5 ms)" in common.goal_line(
        "latency", 3.4, 3.5, "ms", higher=False
    )
    assert "not met" in common.goal_line("latency", 3.6, 3.5, "ms", higher=False)
    assert "not measured (target >= 80 %)" in common.goal_line("share", None, 80, "%")
    assert "not measured" in common.goal_line("share", float("nan"), 80, "%")


def test_ratio_and_fmt():
    assert common.ratio(6, 3) == 2
    assert common.ratio(None, 3) is None and common.ratio(1, 0) is None
    assert common.fmt(12345.6) == "12,346"
    assert common.fmt(None) == "-" and common.fmt(float("nan")) == "-"


# === The machine ===


def test_cpu_info_and_machine_name(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: AMD EPYC 9R14 96-Core Processor\n"
        "flags\t\t: fpu avx2 avx512f avx512_bf16 avx512_vnni sse\n"
    )
    info = common.cpu_info(str(cpuinfo))
    assert info["model"] == "AMD EPYC 9R14 96-Core Processor"
    assert info["flags"] == ["avx2", "avx512f", "avx512_vnni", "avx512_bf16"]
    name = common.machine_name(info)
    assert name.startswith("amd-epyc-9r14-96-core") and name.endswith(f"-{os.cpu_count()}cpu")


# === The results file ===


def test_results_path():
    import datetime

    path = common.results_path(datetime.date(2026, 1, 2), "box-2cpu", "/r")
    assert path == "/r/2026-01-02-box-2cpu.md"


def test_append_section_creates_then_appends(tmp_path):
    path = str(tmp_path / "sub" / "2026-01-02-box.md")
    common.append_section(path, "First", "| a |\n", header="# Head")
    common.append_section(path, "Second", "body two")
    text = open(path, encoding="utf-8").read()
    assert text == "# Head\n\n## First\n\n| a |\n\n## Second\n\nbody two\n"
    assert os.listdir(tmp_path / "sub") == ["2026-01-02-box.md"]  # no temporary left


def test_append_section_new_file_gets_machine_header(tmp_path):
    path = str(tmp_path / "r.md")
    common.append_section(path, "Only", "x")
    text = open(path, encoding="utf-8").read()
    assert text.startswith("# Benchmarks, ") and "- CPU: " in text and "## Only\n\nx\n" in text


def test_append_section_is_atomic(tmp_path, monkeypatch):
    path = str(tmp_path / "r.md")
    common.append_section(path, "Kept", "old", header="# H")
    before = open(path, encoding="utf-8").read()

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        common.append_section(path, "Lost", "new")
    monkeypatch.undo()
    assert open(path, encoding="utf-8").read() == before
    assert os.listdir(tmp_path) == ["r.md"]


def test_publish_prints_and_writes(tmp_path, capsys):
    import argparse

    args = argparse.Namespace(threads=2, quick=True, no_write=False, results=str(tmp_path / "r.md"))
    common.publish(args, "Title", "| t |")
    out = capsys.readouterr().out
    assert "## Title" in out and "not a measurement" in out
    assert "## Title" in open(args.results, encoding="utf-8").read()


def test_an_accelerators_lines_head_a_new_results_file_only(tmp_path):
    """gpu.py's results file starts with the CPU's lines and the accelerator's (driver, jax);
    a later section adds none."""
    import argparse

    args = argparse.Namespace(
        threads=2, quick=False, no_write=False, results=str(tmp_path / "r.md")
    )
    common.publish(args, "One", "x", "- accelerator: 1 x NVIDIA H200 (gpu)\n")
    common.publish(args, "Two", "y", "- accelerator: 1 x NVIDIA H200 (gpu)\n")
    text = open(args.results, encoding="utf-8").read()
    assert text.count("- accelerator: 1 x NVIDIA H200 (gpu)") == 1
    assert text.index("- CPU: ") < text.index("- accelerator: ") < text.index("## One")


def test_gpu_splits_the_rows_that_miss_their_goal():
    """--profile missed (the default): a dropout-0 row under its goal gets the split (base
    at the H200's 29.1 % MFU did), one at or over it, at dropout 0.1 or without a goal not;
    --profile all, every row; a split table names its parts."""
    import argparse

    import gpu

    missed = argparse.Namespace(profile="missed")
    base = {"preset": "base", "dropout": 0.0, "mfu_percent": 29.1, "tokens_per_second": 5e5}
    assert gpu.profiled(missed, base)
    assert not gpu.profiled(missed, base | {"mfu_percent": 35.0})
    assert not gpu.profiled(missed, base | {"dropout": 0.1})
    assert not gpu.profiled(missed, base | {"mfu_percent": None})  # no peak known: no goal
    minilm = {"preset": "minilm-l6", "dropout": 0.0, "mfu_percent": 14.7}
    assert gpu.profiled(missed, minilm | {"tokens_per_second": 1.2e6})
    assert not gpu.profiled(missed, minilm | {"tokens_per_second": 1_852_119})
    small = {"preset": "small", "dropout": 0.0, "mfu_percent": 1.0, "tokens_per_second": 1.0}
    assert not gpu.profiled(missed, small)
    assert gpu.profiled(argparse.Namespace(profile="all"), small)
    assert not gpu.profiled(argparse.Namespace(profile="none"), base)
    split = {"input_ms_per_step": 1.5, "steps_ms_per_step": 55.0, "rest_ms_per_step": 5.8}
    table = gpu.split_section([base | {"ms_per_step": 62.3} | split])
    assert "| base | 0.0 | 62.30 | 1.50 | 55.00 | +5.80 |" in table
    assert gpu.split_section([]) == ""


# === Command line ===


def test_parse_enforces_repeats_outside_quick():
    import argparse

    assert common.parse(argparse.ArgumentParser(), ["--quick", "--no-write"]).repeats == 2
    args = common.parse(argparse.ArgumentParser(), ["--no-write"])
    assert args.repeats == common.MIN_REPEATS and args.results.startswith(common.RESULTS_DIR)
    with pytest.raises(SystemExit):
        common.parse(argparse.ArgumentParser(), ["--repeats", "3"])
    named = common.parse(argparse.ArgumentParser(), [], machine=lambda: "nvidia-h200")
    assert named.results.endswith("-nvidia-h200.md")
    assert os.path.isfile(common.VOCAB)  # the scripts' --vocab, committed


# === Script helpers ===


def test_cosines():
    import encoder_inference

    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) + 1
    assert encoder_inference.cosine(a, a) == pytest.approx(1.0)
    assert encoder_inference.cosine(a, -a) == pytest.approx(-1.0)
    b = a.copy()
    b[1, 2] = -b[1, 2]
    assert encoder_inference.min_token_cosine(a, b) == pytest.approx(-1.0)
    assert encoder_inference.cosine(a, b) < 1.0


def test_tokenization_agreement():
    import tokenization

    ref = {"token_ids": np.array([[1, 2, 0], [3, 4, 0]])}
    assert tokenization.agreement({"token_ids": np.array([[1, 2, 0], [3, 5, 0]])}, ref) == 0.5
    assert tokenization.agreement({"ids": [[1]]}, ref) is None
    assert tokenization.count_tokens({"padding_mask": np.array([[1, 1, 0]])}) == 2


def test_scaling_knee_and_attention_share():
    import scaling

    assert scaling.knee([(1, 10.0), (4, 50.0), (16, 95.0), (64, 100.0)]) == 16
    assert scaling.knee([(1, None)]) is None
    config = types.SimpleNamespace(hidden_dim=4, intermediate_dim=8)
    assert scaling.attention_share(config, 2) == pytest.approx(64 / 576)


# === The call-tree plugin ===


def _target():
    from model.config import BertConfig

    return BertConfig.preset("tiny")


def test_call_tree_counts_only_what_runs_beneath_its_target(monkeypatch):
    import call_tree

    from model.io.files import check_paths

    root = os.path.dirname(BENCH) + os.sep
    monkeypatch.setattr(call_tree, "ROOT", root)
    monkeypatch.setattr(call_tree, "TARGET", "tests/test_bench.py:_target")
    monkeypatch.setattr(call_tree, "_seen", {})
    previous = sys.getprofile()
    sys.setprofile(call_tree._profile)
    try:
        check_paths()  # model/ code, not beneath the target
        _target()
    finally:
        sys.setprofile(previous)
    seen = {(path, name): length for (path, _, name), length in call_tree._seen.items()}
    assert ("model/config.py", "BertConfig.preset") in seen
    assert all(path.startswith(("model/", "export/", "app/")) for path, _ in seen)
    assert not any(name == "check_paths" for _, name in seen)
    assert not any(name.startswith("<") for _, name in seen)  # no comprehension or lambda
    preset = inspect_lines("model/config.py", "preset")
    assert seen[("model/config.py", "BertConfig.preset")] == preset


def inspect_lines(path: str, name: str) -> int:
    import ast

    with open(os.path.join(os.path.dirname(BENCH), path), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    (node,) = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name]
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return node.end_lineno - first + 1
