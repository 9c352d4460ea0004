"""The first-use cache's record (``harness.measure.first_use_cache``): the round trip,
the version check, damaged files moved aside with a warning, and the key (GPU name and SM
count per file; M, N, K, dtype and layout per entry)."""

import json

import pytest

from harness.measure import first_use_cache as fuc
from harness.measure.first_use_cache import CacheFile, Entry, FirstUseCacheWarning, Tried
from kernels import GemmConfig, GemmShape

GPU, SMS = "NVIDIA H200", 132
SHAPE = GemmShape(3000, 5000, 7000, "bfloat16")
CONFIG = GemmConfig.from_id("b128x256x64_t256_s3_w8_e")


def entry(shape=SHAPE, config=CONFIG, tilelang="0.1.15", ms=0.61):
    return Entry(
        shape,
        config,
        ms,
        (
            Tried("b128x256x64_t256_s3_w16_e", 0.64),
            Tried(config.id, ms),
            Tried("b64x64", None, "x"),
        ),
        60.0,
        41.5,
        "2026-12-01",
        tilelang,
    )


def test_an_entry_round_trips_through_its_file(tmp_path):
    cache = CacheFile(tmp_path, GPU, SMS)
    cache.put(entry())
    assert cache.read() == {SHAPE.id: entry()}
    data = json.loads(cache.path.read_text())
    assert (data["version"], data["gpu"], data["sm_count"]) == (fuc.VERSION, GPU, SMS)
    row = data["entries"][SHAPE.id]
    assert row["config"] == CONFIG.id and row["tried"][2] == {
        "config": "b64x64",
        "latency_ms": None,
        "error": "x",
    }
    assert Entry.from_dict(entry().to_dict(), "here") == entry()


def test_put_keeps_the_other_shapes_and_replaces_the_same_one(tmp_path):
    cache = CacheFile(tmp_path, GPU, SMS)
    other = GemmShape(96, 7168, 2048, "float16", "NT")
    cache.put(entry())
    cache.put(entry(shape=other))
    cache.put(entry(ms=0.5))
    got = cache.read()
    assert sorted(got) == sorted([SHAPE.id, other.id]) and got[SHAPE.id].latency_ms == 0.5


def test_the_key_is_gpu_name_and_sm_count_per_file_and_the_shape_per_entry(tmp_path):
    assert fuc.file_name("NVIDIA H200", 132) == "nvidia-h200-132sm.json"
    assert fuc.file_name("NVIDIA H100 80GB HBM3", 132) == "nvidia-h100-80gb-hbm3-132sm.json"
    CacheFile(tmp_path, GPU, SMS).put(entry())
    # Same name, fewer SMs (a cut-down part); another name with the same SMs: not found.
    assert CacheFile(tmp_path, GPU, 114).get(SHAPE, "0.1.15") is None
    assert CacheFile(tmp_path, "NVIDIA H100", SMS).get(SHAPE, "0.1.15") is None
    cache = CacheFile(tmp_path, GPU, SMS)
    assert cache.get(SHAPE, "0.1.15") == entry()
    for other in (
        GemmShape(3000, 5000, 7000, "float16"),  # dtype
        GemmShape(3000, 5000, 7000, "bfloat16", "NT"),  # layout
        GemmShape(3000, 5000, 7168, "bfloat16"),  # K
        GemmShape(5000, 3000, 7000, "bfloat16"),  # M and N
    ):
        assert cache.get(other, "0.1.15") is None
    assert cache.get(SHAPE, "0.1.16") is None  # tuned under another TileLang: stale


def test_the_folder_comes_from_the_environment(tmp_path):
    assert fuc.cache_dir({"TILELANG_GEMM_PERF_CACHE": str(tmp_path)}) == tmp_path
    xdg = {"XDG_CACHE_HOME": str(tmp_path)}
    assert fuc.cache_dir(xdg) == tmp_path / "tilelang-gemm-perf"
    assert fuc.cache_dir({}).parts[-2:] == (".cache", "tilelang-gemm-perf")


def _damaged_cases():
    good = {"version": 1, "gpu": GPU, "sm_count": SMS, "entries": {SHAPE.id: entry().to_dict()}}
    bad_config = json.loads(json.dumps(good))
    bad_config["entries"][SHAPE.id]["config"] = "b100x128"
    misfiled = json.loads(json.dumps(good))
    misfiled["entries"] = {"m1_n1_k1_f16": good["entries"][SHAPE.id]}
    no_ms = json.loads(json.dumps(good))
    no_ms["entries"][SHAPE.id]["latency_ms"] = -1
    return [
        ("{not json", "not valid JSON"),
        (json.dumps({**good, "version": 2}), "version=2: this reader needs 1"),
        (json.dumps({**good, "gpu": "NVIDIA H100"}), "gpu='NVIDIA H100', sm_count=132: the file"),
        (json.dumps([1]), "must be an object with ['version', 'gpu', 'sm_count', 'entries']"),
        (json.dumps(bad_config), "config"),
        (json.dumps(misfiled), f"holds {SHAPE.id}"),
        (json.dumps(no_ms), "latency_ms=-1: must be a finite number > 0"),
    ]


@pytest.mark.parametrize("text, reason", _damaged_cases())
def test_a_damaged_file_is_moved_aside_with_a_warning_never_an_error(tmp_path, text, reason):
    cache = CacheFile(tmp_path, GPU, SMS)
    cache.path.write_text(text)
    with pytest.warns(FirstUseCacheWarning) as caught:
        assert cache.get(SHAPE, "0.1.15") is None
    message = str(caught[0].message)
    aside = cache.path.with_name(cache.path.name + ".damaged")
    assert str(cache.path) in message and reason in message and str(aside) in message
    assert not cache.path.exists() and aside.read_text() == text
    cache.put(entry())  # the next tuning writes a fresh file
    assert cache.read() == {SHAPE.id: entry()}


def test_a_fresh_file_after_damage_is_written_whole(tmp_path):
    cache = CacheFile(tmp_path, GPU, SMS)
    cache.path.write_text("{torn")
    with pytest.warns(FirstUseCacheWarning):
        cache.put(entry())
    assert cache.read() == {SHAPE.id: entry()}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tried": []}, "tried: must be a non-empty list"),
        ({"tried": [{"config": "x", "latency_ms": 1.0, "error": "y"}]}, "exactly one of"),
        ({"date": ""}, "date='': must be a non-empty string"),
        ({"m": 0}, "GemmShape.m=0"),
        ({"extra": 1}, "must have exactly"),
    ],
)
def test_a_bad_entry_names_the_field(change, message):
    with pytest.raises(fuc.CacheRecordError, match="here") as err:
        Entry.from_dict({**entry().to_dict(), **change}, "here")
    assert message in str(err.value)
