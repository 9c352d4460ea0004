"""The panels that wait for a GPU (``python3 -m benchmarks.panels``): finding them, their
state from their records, and running them in one go under a budget, on the CPU with a
runner that stands in for bench_gemm."""

import json

import pytest

from benchmarks import draw_shapes, panels


def _panel_file(tmp_path, name="mine", seed=11):
    """A panel of two drawn shapes whose about names a record in ``tmp_path``."""
    path = tmp_path / f"offtable_{name}_shapes.json"
    assert draw_shapes.main(["--seed", str(seed), "--mix", "mid=2", "--out", str(path)]) == 0
    data = json.loads(path.read_text())
    record = tmp_path / f"{name}_h200.jsonl"
    data["about"] = (
        f"Two shapes. Timed by python3 -m benchmarks.bench_gemm --shapes {path} --backend "
        f"cupti --run-tilelang --jsonl {record} --config b128x192x64_t256_s4_pr_e; and more."
    )
    path.write_text(json.dumps(data))
    return path, record, [s["m"] for s in data["shapes"]]


def _rows(record, shape_ids):
    with record.open("a") as out:
        out.write('{"meta": {"run": "r1"}}\n')
        for shape in shape_ids:
            out.write(json.dumps({"run": "r1", "shape": shape, "config": "x"}) + "\n")
        out.write('{"run": "r1", "shape": "torn')  # an interrupted write


def test_every_committed_panel_is_found_with_its_own_record():
    found = {p.name: p for p in panels.find_panels()}
    assert {"short_k9", "skinny_nn2", "random8_losers"} <= set(found)
    k9 = found["short_k9"]
    assert k9.record("h200") == panels.ROOT / "reports/short_k9_around_h200.jsonl"
    # Another card's rows go where the repository keeps that card's records.
    assert k9.record("h100") == panels.ROOT / "reports/h100/short_k9_around_h100.jsonl"
    # A record named for any card takes the card's name.
    assert found["skinny_nn2"].record("h200").name == "skinny_nn2_h200.jsonl"
    assert found["skinny_nn2"].record("h100").name == "skinny_nn2_h100.jsonl"


def test_state_reads_the_record_and_skips_torn_lines(tmp_path):
    _panel_file(tmp_path)
    (panel,) = panels.find_panels(tmp_path)
    assert panel.name == "mine" and len(panel.shapes) == 2
    assert panel.state("h200") == "todo"
    first, second = sorted(panel.shapes)
    _rows(tmp_path / "mine_h200.jsonl", [first])
    assert panel.state("h200") == "partial" and panel.timed("h200") == {first}
    _rows(tmp_path / "mine_h200.jsonl", [second])
    assert panel.state("h200") == "done"


def test_a_record_holding_other_shapes_is_a_clash_and_run_refuses_it(tmp_path, capsys):
    """A panel named like an older sweep finds that sweep's record under its name: its
    rows are not the panel's, and ``--run`` would append to them."""
    _panel_file(tmp_path)
    (panel,) = panels.find_panels(tmp_path)
    first = sorted(panel.shapes)[0]
    _rows(tmp_path / "mine_h200.jsonl", [first, "m1000_n1000_k1000_f16"])
    assert panel.foreign("h200") == {"m1000_n1000_k1000_f16"}
    assert panel.state("h200") == "clash" and panel.timed("h200") == {first}
    ran = []
    code = panels.main(["--run", "mine", "--card", "h200"], lambda a, t: ran.append(a) or 0,
                       reports=tmp_path)  # fmt: skip
    assert code == 2 and ran == []
    err = capsys.readouterr().err
    assert "mine's record" in err and "m1000_n1000_k1000_f16" in err and "rename" in err
    # Another card's record is its own: no clash there.
    assert panel.state("h100") == "todo"


def test_no_committed_panel_clashes_with_a_record():
    for panel in panels.find_panels():
        for card in ("h200", "h100"):
            assert not panel.foreign(card), (panel.name, card, sorted(panel.foreign(card))[:3])


def test_a_panel_runs_its_own_command_with_resume(tmp_path):
    _panel_file(tmp_path)
    (panel,) = panels.find_panels(tmp_path)
    args = panel.command("h200")
    assert args[args.index("--jsonl") + 1].endswith("mine_h200.jsonl")
    assert args.count("--resume") == 1 and "--config" in args
    assert panel.command("h200") == args  # the file's arguments are not changed


def test_run_keeps_order_and_stops_starting_when_the_budget_is_spent(tmp_path, capsys):
    _panel_file(tmp_path, "one", 11)
    _panel_file(tmp_path, "two", 12)
    one, two = panels.find_panels(tmp_path)
    calls = []

    def runner(argv, timeout):
        calls.append((argv, timeout))
        _rows(tmp_path / "one_h200.jsonl", sorted(one.shapes))
        return 0

    # Room for both: each runs by its own command, and every shape is then timed.
    assert panels.run_panels([one, two], "h200", 100, 1, runner) == 0
    assert [c[0][c[0].index("--shapes") + 1] for c in calls] == [str(one.path), str(two.path)]
    assert all(0 < t <= 100 for _, t in calls)
    out = capsys.readouterr().out
    assert "[1/2] one: 2 shapes" in out and "[1/2] one: done" in out and "2/2 shapes" in out
    # No room: nothing starts, and the exit status says that not all ran.
    calls.clear()
    assert panels.run_panels([one, two], "h200", 10, 20, runner) == 1
    assert calls == [] and "not started" in capsys.readouterr().out


@pytest.mark.parametrize("code, word", [(None, "cut short by the budget"), (4, "exit 4")])
def test_a_panel_cut_short_or_failing_makes_the_run_fail(tmp_path, capsys, code, word):
    _panel_file(tmp_path)
    (panel,) = panels.find_panels(tmp_path)
    assert panels.run_panels([panel], "h200", 100, 1, lambda argv, timeout: code) == 1
    assert word in capsys.readouterr().out


def test_bad_input_names_the_option_and_run_needs_a_gpu(capsys):
    assert panels.main(["--run", "no_such_panel"]) == 2
    assert "--run: no panel named no_such_panel" in capsys.readouterr().err
    assert panels.main(["--card", "H 200"]) == 2
    assert "--card 'H 200': must be a card's short name" in capsys.readouterr().err
    ran = []
    assert panels.main(["--run", "short_k9"], runner=lambda *a: ran.append(a)) == 3
    assert "--run times kernels on a GPU" in capsys.readouterr().err and ran == []
    with pytest.raises(SystemExit) as bad:
        panels.main(["--run", "short_k9", "--budget", "0"])
    assert bad.value.code == 2 and "--budget" in capsys.readouterr().err


def test_the_list_shows_each_panel_and_pending_leaves_the_done_out(capsys):
    assert panels.main(["--card", "h100"]) == 0
    listed = capsys.readouterr().out
    assert "short_k9" in listed and "reports/h100/short_k9_around_h100.jsonl" in listed
    done = [line.split()[0] for line in listed.splitlines() if "  done  " in line]
    assert done, listed  # the H100 has timed some panels
    assert panels.main(["--card", "h100", "--pending"]) == 0
    pending = capsys.readouterr().out
    assert not any(line.split()[0] in done for line in pending.splitlines())


@pytest.mark.parametrize(
    "gpu, card",
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ],
)
def test_the_card_is_the_model_as_records_name_it(gpu, card):
    assert panels.card_of(gpu) == card


def test_a_damaged_file_or_a_command_that_does_not_parse_is_named_not_fatal(tmp_path, capsys):
    good, _, _ = _panel_file(tmp_path, "good")
    (tmp_path / "offtable_torn_shapes.json").write_text('{"about": "python3 -m')
    pasted = json.loads(good.read_text())
    pasted["about"] = pasted["about"].replace("--config", "--bogus --config")
    (tmp_path / "offtable_pasted_shapes.json").write_text(json.dumps(pasted))
    problems = []
    assert [p.name for p in panels.find_panels(tmp_path, problems)] == ["good"]
    why = dict(problems)
    assert "offtable_torn_shapes.json: not valid JSON" in why["torn"]
    assert "its command does not parse" in why["pasted"] and "--bogus" in why["pasted"]
    # The list goes on with a line for each; running one of them is refused by name.
    assert panels.main([], reports=tmp_path) == 0
    out = capsys.readouterr()
    assert "good" in out.out and "not a panel: " in out.err and "torn" in out.err
    assert panels.main(["--run", "pasted"], reports=tmp_path) == 2
    assert "--run: " in capsys.readouterr().err


def test_a_drawn_list_is_an_offtable_panel_measured_by_offtable(tmp_path, capsys):
    path = tmp_path / "offtable_drawn_shapes.json"
    assert draw_shapes.main(["--seed", "5", "--mix", "mid=3", "--out", str(path)]) == 0
    plain = tmp_path / "offtable_plain_shapes.json"  # neither a command nor a draw
    plain.write_text(json.dumps({**json.loads(path.read_text()), "about": "Three shapes."}))
    (panel,) = panels.find_panels(tmp_path)
    assert panel.name == "drawn" and panel.module == "benchmarks.offtable"
    record = tmp_path / "offtable_drawn_h200.json"
    assert panel.record("h200") == record
    assert panel.record("h100") == panels.REPORTS / "h100/offtable_drawn_h100.json"
    assert panel.command("h200") == [
        "--resume", "--shapes", str(path), "--json", str(record),
        "--markdown", str(tmp_path / "offtable_drawn_h200.md"),
    ]  # fmt: skip
    # Its state reads the off-table record's rows; a damaged record reads as none.
    assert panel.state("h200") == "todo"
    first, *rest = sorted(panel.shapes)
    record.write_text(json.dumps({"meta": {}, "rows": [{"shape": first}]}))
    assert panel.state("h200") == "partial" and panel.timed("h200") == {first}
    record.write_text(json.dumps({"rows": [{"shape": s} for s in panel.shapes]}))
    assert panel.state("h200") == "done"
    record.write_text('{"rows": [{"shape": "m')
    assert panel.timed("h200") == set()
    # --run starts benchmarks.offtable on it, not bench_gemm.
    calls = []
    assert panels.run_panels([panel], "h200", 100, 1, lambda a, t: calls.append(a) or 0) == 0
    assert calls[0][1:3] == ["-m", "benchmarks.offtable"] and "--resume" in calls[0]


def test_the_committed_random_lists_are_panels_with_their_records():
    found = {p.name: p for p in panels.find_panels()}
    random9 = found["random9"]
    assert random9.module == "benchmarks.offtable"
    assert random9.record("h200") == panels.ROOT / "reports/offtable_random9_h200.json"
    assert random9.record("h100") == panels.ROOT / "reports/h100/offtable_random9_h100.json"
    assert random9.state("h100") == "done"  # the H100's record is committed
    from benchmarks import offtable

    args = offtable.build_parser().parse_args(random9.command("h200"))
    assert args.resume and str(args.json) == "reports/offtable_random9_h200.json"
    assert str(args.markdown) == "reports/offtable_random9_h200.md"
    assert found["random8"].state("h200") == "done"
