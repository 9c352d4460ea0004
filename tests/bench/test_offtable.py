"""The off-table measurement (``python3 -m benchmarks.offtable``) on the CPU: its
committed shape list, the checks on a shapes file, ``--list``, the no-GPU path, and the
per-shape and summary arithmetic from made-up rounds."""

import json
import subprocess
import sys

import pytest

from benchmarks import offtable
from harness import cli
from harness.report.offtable import Record, ShapeResult, render_markdown, summarise
from kernels import GemmConfig, GemmShape
from kernels.tuned import heuristic
from tests.conftest import NO_GPU

SMS = 132


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.offtable", *args], capture_output=True, text=True
    )


def test_the_committed_list_covers_every_category_and_no_tuned_case():
    shapes = offtable.load_shapes(offtable.SHAPES_FILE)
    assert len(shapes) >= 12
    assert {c for s in shapes for c in s.categories} == set(offtable.CATEGORIES)
    assert {s.shape.dtype for s in shapes} == {"float16", "bfloat16"}
    assert {s.shape.layout for s in shapes} == {"NN", "NT"}
    assert not {s.shape for s in shapes} & offtable.tuned_shapes()
    assert len(offtable.tuned_shapes()) == 16  # every case in both dtypes


COMMITTED_LISTS = sorted(
    [
        *offtable.SHAPES_FILE.parent.glob("offtable_*.json"),
        *(offtable.SHAPES_FILE.parents[1] / "reports").glob("offtable_*_shapes.json"),
    ]
)


@pytest.mark.parametrize("path", COMMITTED_LISTS, ids=lambda p: p.name)
def test_every_committed_list_still_holds_only_off_table_shapes(path):
    # A list is drawn once and measured later: a shape that has since become a tuned case,
    # or left its category, would turn its record into a claim about something else.
    assert offtable.load_shapes(path)


def test_the_committed_lists_are_found():
    names = {p.name for p in COMMITTED_LISTS}
    assert {"offtable_shapes.json", "offtable_holdout.json", "offtable_random_shapes.json"} <= names


def _entry(**over):
    entry = {"m": 2048, "n": 2048, "k": 2048, "dtype": "float16", "layout": "NN"}
    return {**entry, "categories": ["mid"], **over}


@pytest.mark.parametrize(
    "shapes, message",
    [
        ([_entry(m=4096, n=4096, k=4096)], "shapes[0]: m4096_n4096_k4096_f16 is a tuned case"),
        ([_entry(categories=["long_k"])], "shapes[0]: categories: m2048_n2048_k2048_f16 is not"),
        (
            [_entry(m=512, n=4096, k=128, categories=["short_k"])],
            "m512_n4096_k128_f16 is not short_k (K <= 256, M and N >= 1024)",
        ),
        ([_entry(categories=["tiny"])], "shapes[0]: categories: 'tiny' must be one of"),
        ([_entry(categories=[])], "shapes[0]: categories: must be a non-empty list"),
        ([_entry(m=0)], "shapes[0]: GemmShape.m=0: must be >= 1"),
        ([_entry(dtype="float32")], "shapes[0]: GemmShape.dtype='float32'"),
        ([_entry(), _entry()], "shapes[1]: m2048_n2048_k2048_f16 is listed twice"),
        (
            [{"m": 1, "n": 2, "k": 3, "dtye": "float16"}],
            "shapes[0]: must be an object with keys ['m', 'n', 'k', 'dtype', 'layout', "
            "'categories'] ('categories' may be left out); missing ['dtype', 'layout'], "
            "unknown ['dtye']",
        ),
        ([7], "shapes[0]: must be an object with keys"),
        ([], "shapes: must not be empty"),
    ],
)
def test_a_bad_shapes_file_names_the_entry_and_the_rule(tmp_path, shapes, message):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({"shapes": shapes}))
    with pytest.raises(ValueError, match="shapes") as err:
        offtable.load_shapes(path)
    assert message in str(err.value) and str(path) in str(err.value)
    out = _run("--shapes", str(path), "--list", "--sms", "132")
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_an_entry_without_categories_gets_those_whose_rules_it_meets(tmp_path):
    # A list pasted from elsewhere names no categories: each entry gets the ones its
    # shape meets, none perhaps (8192x4096x1024: no rule holds), and is checked as any.
    plain = {"dtype": "bfloat16", "layout": "NT"}
    entries = [
        {"m": 1536, "n": 1200, "k": 1736, **plain},
        {"m": 96, "n": 640, "k": 15824, **plain},
        {"m": 8192, "n": 4096, "k": 1024, **plain},
    ]
    path = tmp_path / "pasted.json"
    path.write_text(json.dumps({"shapes": entries}))
    got = offtable.load_shapes(path)
    assert [s.categories for s in got] == [
        ("mid", "non_multiple"),
        ("non_multiple", "skinny_m", "long_k"),
        (),
    ]
    out = _run("--shapes", str(path), "--list", "--sms", "132")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:]]
    assert [r[1] for r in rows] == ["mid,non_multiple", "non_multiple,skinny_m,long_k", "-"]
    # Left out or not, a tuned case is still refused.
    square = {"m": 4096, "n": 4096, "k": 4096, "dtype": "bfloat16", "layout": "NN"}
    path.write_text(json.dumps({"shapes": [square]}))
    with pytest.raises(ValueError, match="is a tuned case"):
        offtable.load_shapes(path)


def test_list_prints_each_shape_with_the_config_pick_config_chooses():
    out = _run("--list", "--sms", str(SMS))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    shapes = offtable.load_shapes(offtable.SHAPES_FILE)
    assert len(lines) == len(shapes) + 1 and f"for {SMS} SMs" in lines[0]
    for line, s in zip(lines[1:], shapes, strict=True):
        fields = line.split()
        assert fields[0] == s.shape.id
        assert fields[2] == heuristic(s.shape, SMS).id and fields[3] == "heuristic"
    # Another SM count, another pick: the SMs given are the ones used.
    few = _run("--list", "--sms", "16").stdout
    assert few != out.stdout


def test_list_counts_the_blocks_a_launch_runs_under_every_schedule():
    """A stream-K pick launches one block per SM, not one per tile; a pair of blocks in
    a cluster rounds an odd tile count up; split-K multiplies the tiles."""
    sk = GemmShape(7280, 6280, 3904, "bfloat16", "NT")  # 1,254 tiles of 192x192
    pair = GemmShape(1312, 2792, 1832, "bfloat16", "NT")  # 11 x 11 tiles of 128x256
    split = GemmShape(80, 640, 15824, "float16", "NT")
    entries = [offtable.OffTableShape(s, ("mid",)) for s in (sk, pair, split)]
    by_id = {line.split()[0]: line for line in offtable.list_lines(entries, None, SMS)[1:]}
    stream_k = heuristic(sk, SMS)
    assert stream_k.stream_k == SMS
    assert f"{SMS} blocks (1.00 waves)" in by_id[sk.id]
    paired = heuristic(pair, SMS)
    assert paired.multicast == "b" and not (paired.persistent or paired.stream_k)
    assert f"{12 * 11} blocks" in by_id[pair.id]
    k_split = heuristic(split, SMS)
    assert k_split.split_k > 1
    tiles = -(-split.m // k_split.block_m) * -(-split.n // k_split.block_n)
    assert f"{tiles * k_split.split_k} blocks" in by_id[split.id]


# On a GPU machine the command measures instead; its no-GPU path is what is tested here.
@pytest.mark.skipif(NO_GPU is None, reason="a GPU is visible: the command would measure")
def test_without_a_gpu_it_says_so_and_exits_3():
    out = _run("--rounds", "2")
    assert out.returncode == cli.EXIT_NO_GPU
    assert "this command times kernels on a GPU" in out.stderr and "Traceback" not in out.stderr
    out = _run("--list")  # no --sms: the SM count would come from the GPU
    assert out.returncode == 2 and "give --sms N" in out.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rounds", "0"], "argument --rounds: 0 must be >= 1"),
        (["--timer", "wall"], "argument --timer: invalid choice"),
        (["--sms", "132"], "--sms/--gpu: only with --list"),
        (["--list", "--sms", "-1"], "argument --sms: -1 must be >= 1"),
        (["--shapes", "/nonexistent/shapes.json"], "cannot read"),
    ],
)
def test_bad_arguments_name_the_option(args, message):
    out = _run(*args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_help_explains_itself():
    out = _run("--help")
    assert out.returncode == 0
    for word in ("pick_config", "float64", "--rounds", "--list", "median", "0.90", "long_k"):
        assert word in out.stdout


def _row(name, kernel, torch, **over):
    fields = dict(rel_error=1e-4, correct=True, launches=6, timer="cupti")
    source = over.pop("source", "heuristic")
    return ShapeResult.of(
        GemmShape(*name),
        ("mid",),
        "b128x256x64_t256_s3_w16_e",
        source,
        kernel_ms=tuple(kernel),
        torch_ms=tuple(torch),
        **{**fields, **over},
    )


def test_speedup_is_the_median_round_and_the_range_its_extremes():
    row = _row((2048, 2048, 2048), [1.0, 2.0, 1.0, 0.5], [1.0, 1.0, 1.1, 0.5])
    assert row.speedups == pytest.approx((1.0, 0.5, 1.1, 1.0))
    assert row.speedup == pytest.approx(1.0) and row.spread == pytest.approx((0.5, 1.1))


def test_summary_counts_the_median_the_worst_and_those_below_the_floor():
    rows = [
        _row((1000, 1000, 1000), [1.0] * 3, [0.96, 0.97, 0.95]),  # 0.96
        _row((1100, 1000, 1000), [1.0] * 3, [0.80, 0.85, 0.82]),  # 0.82
        _row((1200, 1000, 1000), [1.0] * 3, [1.05, 1.00, 1.10]),  # 1.05
        _row((1300, 1000, 1000), [1.0] * 3, [0.89, 0.89, 0.95]),  # 0.89
        _row((1400, 1000, 1000), (), (), error="RuntimeError: no build"),
    ]
    s = summarise(rows)
    assert s.count == 5 and s.failed == 1
    assert s.median == pytest.approx((0.89 + 0.96) / 2)
    assert s.worst == pytest.approx(0.82) and s.worst_shape == "m1100_n1000_k1000_f16"
    assert s.below == ("m1100_n1000_k1000_f16", "m1300_n1000_k1000_f16")
    assert not s.met and "NOT met" in s.line() and "1 failed" in s.line()
    good = summarise([rows[0], rows[2]])
    assert good.met and good.below == () and good.median == pytest.approx((0.96 + 1.05) / 2)
    assert summarise([rows[4]]).median is None


def test_the_record_round_trips_and_renders():
    tried = (
        {"config": "b128x256x64_t256_s3_w16_e", "latency_ms": 0.0251, "error": None},
        {"config": "b128x192x64_t256_s4_pr_e", "latency_ms": None, "error": "WrongResult: x"},
    )
    rows = (_row((2048, 2048, 2048), [1.0, 1.0], [0.9, 1.0], source="tuned now", tried=tried),)
    record = Record({"gpu": "NVIDIA H200", "sm_count": SMS, "rounds": 2}, rows)
    data = json.loads(json.dumps(record.to_dict()))
    assert data["rows"][0]["speedup"] == pytest.approx(0.95)
    assert data["rows"][0]["range"] == pytest.approx([0.9, 1.0])
    assert data["summary"]["median"] == pytest.approx(0.95) and data["summary"]["met"] is True
    assert Record.from_dict(data).rows == rows
    text = render_markdown(record)
    assert "| `m2048_n2048_k2048_f16` | NN | mid |" in text and "0.900-1.000" in text
    assert "Configs from `kernels.tuned.pick_config` for 132 SMs" in text
    assert "Stopped after" not in text  # no planned count: nothing to be short of
    assert "Stopped after" not in render_markdown(Record({**record.meta, "planned": 1}, rows))
    # A first-use run says so, with its budget.
    tuned = Record({**record.meta, "first_use": {"budget_s": 60.0, "candidates": 24}}, rows)
    head = render_markdown(tuned).splitlines()[2]
    assert "first-use tuning" in head and "24 candidates timed within 60.0 s" in head
    assert "pick_config" not in head
    with pytest.raises(ValueError, match="version=7"):
        Record.from_dict({**data, "version": 7})


def test_exit_status_follows_the_rows():
    ok = _row((2048, 2048, 2048), [1.0], [1.0])
    wrong = _row((1000, 1000, 1000), (), (), correct=False, error="wrong result")
    broken = _row((1100, 1000, 1000), (), (), correct=None, error="RuntimeError")
    assert offtable.exit_status([ok], False) == 0
    assert offtable.exit_status([ok, broken], False) == cli.EXIT_FAILED
    assert offtable.exit_status([ok, broken, wrong], False) == cli.EXIT_INCORRECT
    assert offtable.exit_status([ok], True) == cli.EXIT_INTERRUPTED


def test_a_hung_launch_keeps_the_shapes_measured_before_it(tmp_path, monkeypatch):
    """The second shape's kernel never finishes: the check ends the process (status 6),
    and the record of the first shape is written before it does, JSON and markdown."""
    import types

    import harness.suite.precompile as precompile
    from harness.measure import correctness

    shapes = [
        offtable.OffTableShape(GemmShape(2048, 2048, 2048), ("mid",)),
        offtable.OffTableShape(GemmShape(1536, 1536, 1536, "bfloat16", "NT"), ("mid",)),
    ]

    def measure(entry, config, source, args, tried=()):
        if entry.shape.m == 1536:  # what check_launch's watchdog does on a hung launch
            correctness.hung(f"gemm {entry.shape.id} {config.id}", 60.0)
        return _row((entry.shape.m, entry.shape.n, entry.shape.k), [1.0, 1.0], [0.98, 0.99])

    class Exited(BaseException):
        pass

    def exit_(status):
        raise Exited(status)

    monkeypatch.setattr(precompile, "compile_gemms", lambda pairs, progress, workers: {})
    monkeypatch.setattr(offtable, "measure_shape", measure)
    monkeypatch.setattr(correctness.os, "_exit", exit_)
    args = types.SimpleNamespace(
        budget=None, workers=1, json=tmp_path / "r.json", markdown=tmp_path / "r.md"
    )
    spec = types.SimpleNamespace(name="NVIDIA H200", sm_count=SMS)
    meta = {"gpu": "NVIDIA H200", "sm_count": SMS, "rounds": 2, "planned": len(shapes)}
    from rich.console import Console

    console = Console(file=open(tmp_path / "out.txt", "w"), width=200)
    keep = lambda rows: offtable.write_record(args, meta, rows, console)  # noqa: E731
    with pytest.raises(Exited) as err:
        offtable.run(shapes, args, spec, console, keep=keep)
    assert err.value.args == (cli.EXIT_HUNG,)
    record = Record.from_dict(json.loads(args.json.read_text()))
    assert [r.shape for r in record.rows] == ["m2048_n2048_k2048_f16"]
    # The record says it is short of the list.
    assert "Stopped after 1 of 2 shapes" in args.markdown.read_text()
    assert record.meta["planned"] == 2
    assert "m2048_n2048_k2048_f16" in args.markdown.read_text()
    assert not correctness._LAST_WORDS  # the hook left with the run


@pytest.mark.parametrize("rounds, placements", [(1, 1), (2, 2), (8, 3)])
def test_fewer_rounds_than_input_sets_still_measure(monkeypatch, rounds, placements):
    """``--rounds`` below ``versus.PLACEMENTS`` measures over as many sets as rounds,
    one round each, rather than failing the shape."""
    import argparse
    from types import SimpleNamespace

    import harness.measure.cases
    import harness.measure.versus

    check = SimpleNamespace(ok=True, rel_error=1e-3)
    fake_case = SimpleNamespace(check=lambda config, seed: check, placed=lambda config: None)
    monkeypatch.setattr(harness.measure.cases, "Case", lambda shape, seed: fake_case)
    seen = []

    def placed(bind, trials, sets, warmup, timer):
        seen.append((trials, sets))
        return harness.measure.versus.Versus((0.5,) * trials, (0.4,) * trials, 6, "cupti")

    monkeypatch.setattr(harness.measure.versus, "placed", placed)
    entry = offtable.OffTableShape(GemmShape(2048, 2048, 2048), ("mid",))
    args = argparse.Namespace(rounds=rounds, seed=0, warmup=3, timer="cupti")
    row = offtable.measure_shape(entry, GemmConfig(), "heuristic", args)
    assert seen == [(rounds, placements)] and row.error is None


@pytest.fixture
def fake_device(monkeypatch):
    """A GPU as far as the command can tell, with nothing compiled."""
    import harness.suite.precompile as precompile
    from harness.measure import device

    monkeypatch.setattr(device, "no_gpu_reason", lambda: None)
    spec = device.DeviceSpec("NVIDIA H200", SMS, 232448, 60 * 2**20, (9, 0))
    monkeypatch.setattr(device.DeviceSpec, "read", classmethod(lambda cls, index=0: spec))
    monkeypatch.setattr(device, "versions", lambda: {"tilelang": "t", "torch": "p", "cuda": "c"})
    monkeypatch.setattr(precompile, "compile_gemms", lambda pairs, progress, workers: {})


def _shapes_file(tmp_path, sizes):
    path = tmp_path / "shapes.json"
    entries = [dict(m=m, n=n, k=k, dtype="float16", layout="NN") for m, n, k in sizes]
    path.write_text(json.dumps({"shapes": entries}))
    return path


def _measuring(monkeypatch, stop_at=None):
    """measure_shape made up: each shape's id in ``seen``; the ``stop_at``-th shape
    measured gets SIGTERM (as from ``timeout``) instead of a row."""
    import os
    import signal
    import time

    seen = []

    def measure(entry, config, source, args, tried=()):
        seen.append(entry.shape.id)
        if len(seen) == stop_at:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the handler interrupts this
            raise AssertionError("SIGTERM did not stop the run")
        s = entry.shape
        return _row((s.m, s.n, s.k), [1.0, 1.0], [0.9 + s.m / 1e5, 0.95])

    monkeypatch.setattr(offtable, "measure_shape", measure)
    return seen


SIZES = [(2048, 2048, 2048), (1536, 1536, 1536), (1200, 1000, 1000)]


def test_each_finished_shape_is_written_before_the_next_is_measured(
    tmp_path, monkeypatch, fake_device
):
    """A run killed outright (no handler runs) keeps the shapes it finished: the record
    is rewritten after each one."""
    shapes, out = _shapes_file(tmp_path, SIZES), tmp_path / "r.json"
    on_disk = []

    def measure(entry, config, source, args, tried=()):
        on_disk.append(
            [r["shape"] for r in json.loads(out.read_text())["rows"]] if out.exists() else []
        )
        s = entry.shape
        return _row((s.m, s.n, s.k), [1.0], [1.0])

    monkeypatch.setattr(offtable, "measure_shape", measure)
    assert offtable.main(["--shapes", str(shapes), "--json", str(out)]) == 0
    ids = [GemmShape(*s).id for s in SIZES]
    assert on_disk == [[], ids[:1], ids[:2]]
    assert not list(tmp_path.glob(".*partial"))  # written beside, then renamed over


def test_sigterm_stops_the_run_and_resume_measures_only_the_rest(
    tmp_path, monkeypatch, fake_device, capsys
):
    shapes, out, md = _shapes_file(tmp_path, SIZES), tmp_path / "r.json", tmp_path / "r.md"
    argv = ["--shapes", str(shapes), "--json", str(out), "--markdown", str(md), "--resume"]
    ids = [GemmShape(*s).id for s in SIZES]

    seen = _measuring(monkeypatch, stop_at=2)
    assert offtable.main(argv) == cli.EXIT_INTERRUPTED
    first = Record.from_dict(json.loads(out.read_text()))
    assert [r.shape for r in first.rows] == ids[:1] and seen == ids[:2]
    assert "Stopped after 1 of 3 shapes" in md.read_text()

    seen = _measuring(monkeypatch)
    assert offtable.main(argv) == 0
    assert seen == ids[1:]  # the finished shape is not measured again
    assert "resume: 1 of 3 shapes measured" in capsys.readouterr().out
    whole = Record.from_dict(json.loads(out.read_text()))
    assert [r.shape for r in whole.rows] == ids  # in the list's order
    assert whole.rows[0] == first.rows[0]  # kept as it was measured
    assert whole.meta["command"] == first.meta["command"] and len(whole.meta["resumed"]) == 1
    text = md.read_text()
    assert "Resumed with `--resume`" in text and "Stopped after" not in text

    seen = _measuring(monkeypatch)
    before = (out.read_text(), md.read_text())
    assert offtable.main(argv) == 0 and seen == []  # a whole record: nothing to measure
    assert (out.read_text(), md.read_text()) == before  # and nothing rewritten
    assert "left as it was" in capsys.readouterr().out
    md.unlink()  # a lost table is written again from the whole record, nothing measured
    assert offtable.main(argv) == 0 and seen == []
    assert all(i in md.read_text() for i in ids)
    assert Record.from_dict(json.loads(out.read_text())).rows == whole.rows


@pytest.mark.parametrize(
    "change, named",
    [(["--rounds", "4"], "rounds: was 8, is 4"), (["--seed", "3"], "seed: was 0, is 3")],
)
def test_resume_refuses_a_record_measured_another_way(
    tmp_path, monkeypatch, fake_device, capsys, change, named
):
    shapes, out = _shapes_file(tmp_path, SIZES), tmp_path / "r.json"
    argv = ["--shapes", str(shapes), "--json", str(out), "--resume"]
    _measuring(monkeypatch, stop_at=2)
    assert offtable.main(argv) == cli.EXIT_INTERRUPTED
    seen = _measuring(monkeypatch)
    with pytest.raises(SystemExit) as err:
        offtable.main([*argv, *change])
    assert err.value.code == 2 and seen == []
    assert named in capsys.readouterr().err


def test_resume_refuses_a_record_of_shapes_the_list_lacks(
    tmp_path, monkeypatch, fake_device, capsys
):
    out = tmp_path / "r.json"
    _measuring(monkeypatch)
    argv = ["--json", str(out), "--resume"]
    assert offtable.main(["--shapes", str(_shapes_file(tmp_path, SIZES)), *argv]) == 0
    other = tmp_path / "other"
    other.mkdir()
    fewer = _shapes_file(other, SIZES[1:])
    fewer = fewer.rename(tmp_path / "shapes.json")  # the same file name, one shape less
    with pytest.raises(SystemExit):
        offtable.main(["--shapes", str(fewer), *argv])
    assert "m2048_n2048_k2048_f16, which the shapes file does not list" in capsys.readouterr().err


def test_resume_needs_json():
    out = _run("--resume")
    assert out.returncode == 2 and "--resume" in out.stderr and "--json" in out.stderr


@pytest.mark.parametrize("damage", ['{"version": 1, "meta": {}, "rows": [', "[1, 2]\n"])
def test_resume_refuses_a_damaged_record_naming_it(
    tmp_path, monkeypatch, fake_device, capsys, damage
):
    out = tmp_path / "r.json"
    out.write_text(damage)
    seen = _measuring(monkeypatch)
    with pytest.raises(SystemExit) as err:
        offtable.main(
            ["--shapes", str(_shapes_file(tmp_path, SIZES)), "--json", str(out), "--resume"]
        )
    assert err.value.code == 2 and seen == []
    assert f"--resume: {out}: not an off-table record" in capsys.readouterr().err
    assert out.read_text() == damage  # left as it was, for a person to look at
