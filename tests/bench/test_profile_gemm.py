"""benchmarks.profile_gemm on the CPU: how it reads ncu's raw page (a page written here in
ncu's CSV form, with random figures), the ncu command it builds, and its refusals."""

import csv
import io
import json
import random
import subprocess
import sys

import pytest

from benchmarks import profile_gemm as pg
from tests.conftest import NO_GPU

NVTX = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
STALLS = ["long_scoreboard", "barrier", "wait", "lg_throttle", "selected", "gmma"]
COLUMNS = [
    "ID",
    "Process ID",
    NVTX,
    "Kernel Name",
    *pg.METRICS.values(),
    *(f"{pg.STALL_PREFIX}{s}{pg.STALL_SUFFIX}" for s in STALLS),
]
UNITS = ["", "", "", "", "usecond", "%", "cycle", "cycle", "%", "%", "", "", "", "register/thread"]


def _cell(range_name):
    if range_name is None:
        return ""
    return f'4242  "<default domain>:{range_name}:none:none:none:none:none:none" '


def _row(i, range_name, kernel, rng):
    """A kernel's row: its figures drawn at random, returned with the row."""
    fig = {
        "duration": rng.uniform(5, 90),
        "tensor_pct": rng.uniform(20, 80),
        "active_min": rng.uniform(10_000, 30_000),
        "active_max": rng.uniform(40_000, 60_000),
        "l2_pct": rng.uniform(30, 90),
        "dram_pct": rng.uniform(1, 20),
        "grid": rng.choice([100, 132]),
        "block": 384,
        "cluster": rng.choice([0, 2]),
        "registers": 168,
    }
    stalls = {s: rng.uniform(0.01, 25) for s in STALLS}
    stalls["selected"] = 1.0
    cells = [str(i), "4242", _cell(range_name), kernel]
    cells += [f"{fig[f]:,.2f}" if isinstance(fig[f], float) else str(fig[f]) for f in pg.METRICS]
    cells += [f"{stalls[s]:.2f}" for s in STALLS]
    return cells, fig, stalls


def _page(rows):
    out = io.StringIO()
    out.write("==PROF== Connected to process 4242 (/usr/bin/python3)\n")
    out.write("m1_n1_k1_f16 b1: ok (rel err 2.1e-04, tol 1e-02)\n")  # the child's words
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(COLUMNS)
    w.writerow(UNITS + [""] * (len(COLUMNS) - len(UNITS)))
    for r in rows:
        w.writerow(r)
    return out.getvalue()


@pytest.fixture
def page():
    """Two configs and torch.matmul on one shape: a stream-K config's zeroing of C beside
    its GEMM, a reference kernel outside every range."""
    rng = random.Random()
    shape = "m2096_n2728_k1304_f16_nt"
    sk, pp = "b128x192x64_t256_s4_w8_pr_e_sk132_a_mb", "b128x192x64_t256_s4_p132_a_pp"
    plan = [
        (None, "sm90_xmma_gemm_f64f64"),
        (f"{shape} | {sk}", "vectorized_elementwise_kernel"),
        (f"{shape} | {sk}", "gemm_kernel"),
        (f"{shape} | {pp}", "gemm_kernel"),
        (f"{shape} | {pg.TORCH}", "nvjet_sm90_hsh_128x176_64x5_2x1_v_bz_TNT"),
    ]
    rows, figs = [], []
    for i, (name, kernel) in enumerate(plan):
        cells, fig, stalls = _row(i, name, kernel, rng)
        rows.append(cells)
        figs.append((name, kernel, fig, stalls))
    return _page(rows), figs, shape, sk, pp


def test_the_raw_page_groups_kernels_by_their_range(page):
    text, figs, shape, sk, pp = page
    launches = pg.parse_raw(text)
    assert [(p.shape, p.what) for p in launches] == [(shape, sk), (shape, pp), (shape, pg.TORCH)]
    by = {p.what: p for p in launches}
    sk_figs = [f for name, _, f, _ in figs if name == f"{shape} | {sk}"]
    # Durations in microseconds (the page's unit), both kernels of the launch counted.
    assert by[sk].duration_us == pytest.approx(sum(f["duration"] for f in sk_figs), abs=0.02)
    assert by[sk].main.duration_us == pytest.approx(max(f["duration"] for f in sk_figs), abs=0.01)
    _, kernel, fig, stalls = figs[3]
    main = by[pp].main
    assert main.name == kernel and main.grid == fig["grid"] and main.cluster == fig["cluster"]
    assert main.tensor_pct == pytest.approx(fig["tensor_pct"], abs=0.01)
    assert main.balance == pytest.approx(fig["active_min"] / fig["active_max"], rel=1e-3)
    # The three largest stalls, largest first; "selected" is issuing, not a stall.
    top = sorted((s for s in STALLS if s != "selected"), key=lambda s: -stalls[s])[:3]
    assert [r for r, _ in main.stalls] == top


def test_the_table_gives_torch_over_each_kernel(page):
    text, _, shape, sk, _ = page
    launches = pg.parse_raw(text)
    torch_us = next(p for p in launches if p.what == pg.TORCH).duration_us
    rows = {r[1].split(" +")[0]: r for r in pg.table_rows(launches)}
    kernel_us = next(p for p in launches if p.what == sk).duration_us
    assert float(rows[sk][3]) == pytest.approx(torch_us / kernel_us, abs=1e-3)
    torch_row = next(r for k, r in rows.items() if k.startswith(pg.TORCH))
    assert "nvjet_sm90" in torch_row[1] and torch_row[3] == "1.000"
    md = pg.render_markdown(launches, {"gpu": "NVIDIA H200", "checks": []})
    assert md.startswith("# GEMM kernels under Nsight Compute on the NVIDIA H200")
    assert md.count(f"| {shape} |") == 3


@pytest.mark.parametrize(
    "text, message",
    [
        ("==PROF== nothing profiled\n", "no ncu raw page"),
        ('"ID","Kernel Name","gpu__time_duration.sum"\n"","","ns"\n', "no NVTX column"),
    ],
)
def test_a_page_without_what_the_table_needs_is_refused(text, message):
    with pytest.raises(ValueError, match=message):
        pg.parse_raw(text)


def test_kernels_outside_the_ranges_are_not_launches():
    cells, _, _ = _row(0, None, "sm90_xmma_gemm_f64f64", random.Random())
    with pytest.raises(ValueError, match="no kernel ran inside a range"):
        pg.parse_raw(_page([cells]))


def test_the_ncu_command_leaves_the_clocks_and_profiles_only_the_marked_launches():
    child = [sys.executable, "-m", "benchmarks.profile_gemm", "--shape", "256x256x256"]
    cmd = pg.ncu_command("/opt/ncu", child)
    assert cmd[0] == "/opt/ncu" and cmd[-len(child) :] == child
    joined = " ".join(cmd)
    assert "--clock-control none" in joined and "--profile-from-start off" in joined
    assert "--page raw" in joined and "--csv" in cmd and "--nvtx" in cmd
    assert all(f"--section {s}" in joined for s in pg.SECTIONS)


def test_the_child_gets_the_options_less_the_files_the_parent_writes():
    argv = [
        "--shape",
        "1x2x3",
        "--csv",
        "a.csv",
        "--markdown=b.md",
        "--ncu",
        "/x/ncu",
        "--layout",
        "NT",
    ]
    assert pg._without_outputs(argv) == ["--shape", "1x2x3", "--layout", "NT"]


def test_ncu_is_found_where_given_or_on_path(tmp_path, monkeypatch):
    assert pg.find_ncu(str(tmp_path / "missing-ncu")) is None
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert pg.find_ncu(None) == str(fake)
    assert pg.find_ncu(str(fake)) == str(fake)


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.profile_gemm", *args], capture_output=True, text=True
    )


def test_replay_renders_a_kept_record_without_a_gpu(page, tmp_path):
    text, _, shape, sk, _ = page
    record = tmp_path / "profile.csv"
    record.write_text(text)
    meta = {"gpu": "NVIDIA H200", "date": "2026-12-04", "command": "x", "checks": []}
    meta["checks"].append({"shape": shape, "config": sk, "verdict": "ok (rel err 2.1e-04)"})
    record.with_suffix(".meta.json").write_text(json.dumps(meta))
    md = tmp_path / "profile.md"
    out = _run("--replay", str(record), "--markdown", str(md))
    assert out.returncode == 0, out.stderr
    body = md.read_text()
    assert "NVIDIA H200" in body and f"`{shape}` `{sk}`: ok" in body


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shape", "12x34"], "must be MxNxK"),
        (["--shape", "0x64x64"], "must be >= 1"),
        (["--shape", "256x256x256", "--config", "b128x184x64_t256_s4"], "block_n=184"),
        (["--replay", "x.csv", "--shape", "64x64x64"], "--replay: renders a kept record"),
        (["--dtype", "float16"], "--shape/--shapes: give one or more"),
        (["--shape", "64x64x64", "--shapes", "s.json"], "(not both)"),
        (["--shapes", "s.json", "--layout", "NT"], "--dtype/--layout: only with --shape"),
    ],
)
def test_bad_input_is_named_and_exits_2(args, message):
    out = _run(*args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_a_config_that_cannot_run_on_the_shape_names_both():
    # The hand-written pipeline loads every tile by TMA: rows of 1,004 fp16 elements are
    # not 16-byte aligned.
    config = "b128x192x64_t256_s4_w8_pr_e_p132_a"
    out = _run("--shape", "256x256x1004", "--config", config)
    assert out.returncode == 2, out.stderr
    assert f"--config {config} on m256_n256_k1004_f16" in out.stderr
    assert "async_mma=True: needs the rows of A and B 16-byte aligned" in out.stderr


def test_a_bad_shapes_file_is_named(tmp_path):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({"shapes": [{"m": 64, "n": 64}]}))
    out = _run("--shapes", str(path))
    assert out.returncode == 2 and out.stderr.startswith(f"{pg.PROG}: error: --shapes:")
    assert "Traceback" not in out.stderr


def test_a_damaged_meta_file_is_named_and_the_table_still_renders(page, tmp_path):
    text, _, shape, sk, _ = page
    record = tmp_path / "profile.csv"
    record.write_text(text)
    record.with_suffix(".meta.json").write_text('{"gpu": "NVIDIA H2')  # cut short
    md = tmp_path / "profile.md"
    out = _run("--replay", str(record), "--markdown", str(md))
    assert out.returncode == 0, out.stderr
    assert "profile.meta.json: not valid JSON" in out.stderr and "Traceback" not in out.stderr
    assert f"| {shape} | {sk}" in md.read_text()


def test_a_missing_record_is_named(tmp_path):
    out = _run("--replay", str(tmp_path / "none.csv"))
    assert out.returncode == 2 and "none.csv: cannot read it" in out.stderr


@pytest.mark.skipif(NO_GPU is None, reason="a GPU is visible: the command would profile")
def test_without_a_gpu_it_says_so_and_exits_3():
    out = _run("--shape", "256x256x256")
    assert out.returncode == 3 and "no CUDA device" in out.stderr


@pytest.mark.parametrize(
    "statuses, code",
    [
        ([pg.OK, pg.OK], 0),
        ([pg.OK, pg.FAILED], 5),
        ([pg.FAILED, pg.WRONG, pg.OK], 4),  # a wrong result comes before a failed build
        ([], 0),
    ],
)
def test_the_exit_status_says_the_worst_check(statuses, code):
    checks = [{"shape": "s", "config": f"c{i}", "status": s} for i, s in enumerate(statuses)]
    assert pg.exit_status(checks) == code


def _fake_ncu(tmp_path, page_text, checks, code):
    """An ncu stand-in: prints a raw page and writes the child's checks where the child
    would (its last argument), then exits with ``code``."""
    page = tmp_path / "page.txt"
    page.write_text(page_text)
    meta = json.dumps({"gpu": "Fake GPU", "sm_count": 132, "checks": checks})
    script = tmp_path / "ncu"
    script.write_text(
        f"#!/bin/bash\ncat {page}\nprintf '%s' '{meta}' > \"${{@: -1}}\"\nexit {code}\n"
    )
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("status, code", [(pg.OK, 0), (pg.WRONG, 4), (pg.FAILED, 5)])
def test_a_run_keeps_the_page_the_checks_and_the_table(page, tmp_path, monkeypatch, status, code):
    import torch

    text, _, shape, sk, _ = page
    checks = [{"shape": shape, "config": sk, "verdict": "as checked", "status": status}]
    fake = _fake_ncu(tmp_path, text, checks, code)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    csv_path, md = tmp_path / "p.csv", tmp_path / "p.md"
    argv = ["--shape", "2096x2728x1304", "--layout", "NT", "--config", sk]
    got = pg.main([*argv, "--ncu", str(fake), "--csv", str(csv_path), "--markdown", str(md)])
    assert got == code
    assert csv_path.read_text() == text  # ncu's page, as it wrote it
    meta = json.loads(csv_path.with_suffix(".meta.json").read_text())
    assert meta["gpu"] == "Fake GPU" and meta["checks"] == checks
    assert meta["command"].endswith(f"--csv {csv_path} --markdown {md}")
    assert f"| {shape} | {sk}" in md.read_text()


def test_ncu_failing_without_a_page_is_named(tmp_path, monkeypatch):
    import torch

    fake = _fake_ncu(tmp_path, "==ERROR== the profiler could not start\n", [], 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pg.main(["--shape", "256x256x256", "--ncu", str(fake)]) == 2
