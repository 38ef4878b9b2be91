"""Result files (round trip, atomic write, read errors), error classification and size parsing."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pytest

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process import outcomes as errors
from memprobe.core.process.outcomes import classify_error
from memprobe.core.records.results import (
    SCHEMA,
    SCHEMA_VERSION,
    PrecisionResult,
    ResultFileError,
    ScanResult,
    find_result_files,
    read_result,
    result_filename,
    slug,
    write_result,
)
from memprobe.core.text.units import gib, parse_size


def sample_result() -> ScanResult:
    attempts = [
        Attempt(1, "fit", 100, 128, 0.5).to_dict(),
        Attempt(2, "oom", 300, 512, 0.2, "OutOfMemoryError: x").to_dict(),
    ]
    done = PrecisionResult(
        "fp32",
        status="done",
        max_batch=1,
        stop="edge",
        proof={
            "in_process": {"fits": 1, "fails": 2},
            "fits": 1,
            "fails": 2,
            "fail_outcome": "oom",
            "agreed": True,
            "verified": True,
            "checks": attempts,
        },
        attempts=attempts,
        memory_model={
            "peak_reserved": {
                "static_bytes": 1.5,
                "per_sample_bytes": 2.25,
                "basis": "peak_reserved",
                "points": 2,
                "max_residual_bytes": 0.0,
            }
        },
        capacity_bytes=8 << 20,
        settings={"task": {"parameters": 10}},
        search_seconds=1.25,
        throughput={"samples_per_s": 12.5, "step_time": {"median_s": 0.08}},
        extra_batches=[{"batch": 4}],
    )
    failed = PrecisionResult("bf16", status="error", error="RuntimeError: nope")
    return ScanResult(
        workload={"name": "toy", "family": "toy-mlp", "unit": "samples", "params": {"features": 64}},
        environment={"gpu": {"name": "NVIDIA H100 80GB HBM3"}, "versions": {"torch": "2.13.0"}, "unicode": "µ"},
        settings={"precisions": ["fp32", "bf16"], "steps": 3},
        precisions={"fp32": done, "bf16": failed},
        status="complete",
    )


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or p.suffix == ".tmp")


# --- round trip and atomic writes -------------------------------------------------------------


def test_round_trip_gives_equal_dicts(tmp_path):
    result = sample_result()
    path = write_result(result, tmp_path / "sub" / "r.json")  # the folder is created
    assert path == tmp_path / "sub" / "r.json"
    back = read_result(path)
    assert back.to_dict() == result.to_dict()
    assert back == result
    assert isinstance(back.precisions["fp32"], PrecisionResult)
    assert back.precisions["fp32"].proof.verified is True


def test_file_is_versioned_json_with_schema_first(tmp_path):
    path = write_result(sample_result(), tmp_path / "r.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    assert list(data)[:2] == ["schema", "schema_version"]
    assert data["schema"] == SCHEMA and data["schema_version"] == SCHEMA_VERSION
    assert data["precisions"]["fp32"]["max_batch"] == 1


def test_write_leaves_no_temp_files_and_overwrites(tmp_path):
    first = sample_result()
    write_result(first, tmp_path / "r.json")
    second = sample_result()
    second.status = "partial"
    write_result(second, tmp_path / "r.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
    assert read_result(tmp_path / "r.json").status == "partial"


def test_failed_write_keeps_the_old_file_and_no_temp_file(tmp_path):
    path = write_result(sample_result(), tmp_path / "r.json")
    before = path.read_bytes()
    broken = sample_result()
    broken.settings.extra["not json"] = object()
    with pytest.raises(TypeError):
        write_result(broken, path)
    assert path.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_failed_first_write_leaves_nothing(tmp_path):
    broken = sample_result()
    broken.environment.extra["bad"] = {1, 2}
    with pytest.raises(TypeError):
        write_result(broken, tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []


# --- read errors ------------------------------------------------------------------------------


def check_error(path, *fragments):
    with pytest.raises(ResultFileError) as info:
        read_result(path)
    message = str(info.value)
    assert str(path) in message
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_read_missing_file(tmp_path):
    check_error(tmp_path / "missing.json", "cannot read")


def test_read_folder(tmp_path):
    check_error(tmp_path, "cannot read")


@pytest.mark.parametrize("content", [b"{not json", b"", b"\xff\xfe\x00garbage", b'{"a": 1,\n "b": }'])
def test_read_not_json(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    check_error(path, "not a JSON file")


@pytest.mark.parametrize("data", [[1, 2], "text", {"schema": "other.tool"}, {"workload": {}}])
def test_read_not_a_memprobe_file(tmp_path, data):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(data))
    check_error(path, "not a memprobe result file")


def test_read_newer_schema_version(tmp_path):
    data = sample_result().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    check_error(path, "newer", "upgrade memprobe")


def test_read_incomplete_file(tmp_path):
    data = sample_result().to_dict()
    del data["environment"]
    path = tmp_path / "incomplete.json"
    path.write_text(json.dumps(data))
    check_error(path, "incomplete", "environment")


@pytest.mark.parametrize("precisions", [[], {"fp32": 5}])
def test_read_malformed_precisions_is_a_result_file_error(tmp_path, precisions):
    # read_result promises ResultFileError for any file it cannot read, never a traceback
    data = sample_result().to_dict()
    data["precisions"] = precisions
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(data))
    check_error(path)


def test_read_ignores_unknown_precision_fields(tmp_path):
    data = sample_result().to_dict()
    data["precisions"]["fp32"]["added_in_a_later_minor"] = 1
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    assert read_result(path).precisions["fp32"].max_batch == 1


def test_result_file_error_is_a_value_error():
    assert issubclass(ResultFileError, ValueError)


# --- file names ---------------------------------------------------------------------------------


def test_result_filename_has_gpu_model_mode_time():
    when = datetime(2026, 11, 21, 17, 15, 0, tzinfo=timezone.utc)
    name = result_filename("NVIDIA H100 80GB HBM3", "bert-large", "train", when)
    assert name == "nvidia-h100-80gb-hbm3_bert-large_train_20261121-171500.json"
    assert result_filename("cpu", "toy", "infer", when).startswith("cpu_toy_infer_")


def test_slug():
    assert slug("NVIDIA  A100-SXM4 (80GB)") == "nvidia-a100-sxm4-80gb"
    assert slug("---") == "unknown"
    assert slug("../etc/passwd") == "etc-passwd"


def test_find_result_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.json").write_text("{}")
    (tmp_path / "a" / ".x.json.123.tmp").write_text("{}")
    (tmp_path / "a" / ".hidden.json").write_text("{}")
    (tmp_path / "b.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("")
    found = find_result_files([tmp_path / "a", tmp_path / "b.json"])
    assert found == [tmp_path / "a" / "x.json", tmp_path / "b.json"]


# --- error classification -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "type_name, message, expected",
    [
        ("OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB", errors.OOM),
        ("OutOfMemoryError", "", errors.OOM),
        ("MemoryError", "", errors.OOM),
        ("RuntimeError", "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", errors.OOM),
        ("RuntimeError", "cuDNN error: CUDNN_STATUS_ALLOC_FAILED", errors.OOM),
        ("RuntimeError", "CUDA error: out of memory", errors.OOM),
        ("OutOfMemoryError", "CPU budget exceeded (memprobe fake allocator): 9 live bytes > 8", errors.OOM),
        ("RuntimeError", "CUDA error: invalid configuration argument", errors.LIMIT),
        ("RuntimeError", "CUDA error: too many resources requested for launch", errors.LIMIT),
        ("RuntimeError", "numel needs to be smaller than int32", errors.LIMIT),
        ("RuntimeError", "CUDA error: an illegal memory access was encountered", errors.CRASH),
        (
            "RuntimeError",
            "CUDA error: an illegal memory access was encountered (after: CUDA out of memory)",
            errors.CRASH,
        ),
        ("OutOfMemoryError", "out of memory; then: an illegal memory access was encountered", errors.CRASH),
        ("RuntimeError", "CUDA error: device-side assert triggered", errors.CRASH),
        ("RuntimeError", "CUDA error: unspecified launch failure", errors.CRASH),
        (
            "ValueError",
            "Expected more than 1 value per channel when training, got input size torch.Size([1, 32, 1, 1])",
            errors.TOO_SMALL,
        ),
        ("ValueError", "shapes (3,4) and (5,6) not aligned", errors.ERROR),
        ("KeyError", "'input_ids'", errors.ERROR),
        ("RuntimeError", "", errors.ERROR),
        ("RuntimeError", None, errors.ERROR),
    ],
)
def test_classify_error(type_name, message, expected):
    assert classify_error(type_name, message) == expected


CUDNN_INTERNAL = "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR"


@pytest.mark.parametrize(
    "message, share, expected",
    [
        (CUDNN_INTERNAL, None, errors.ERROR),  # memory state unknown: not called OOM
        (CUDNN_INTERNAL, 0.5, errors.ERROR),  # plenty of memory free: a real library error
        (CUDNN_INTERNAL, 0.99, errors.OOM),  # the H100 NasNet-Large case: 78.4 of 79.2 GiB reserved
        ("CUDA error: CUBLAS_STATUS_INTERNAL_ERROR when calling `cublasLtMatmul`", 0.95, errors.OOM),
        ("shapes (3,4) and (5,6) not aligned", 0.99, errors.ERROR),  # a bug stays a bug when memory is full
    ],
)
def test_internal_library_error_is_oom_only_when_memory_was_nearly_full(message, share, expected):
    assert classify_error("RuntimeError", message, reserved_share=share) == expected


def test_with_memory_state_explains_a_reclassification():
    outcome, note = errors.with_memory_state(errors.ERROR, "RuntimeError", CUDNN_INTERNAL, 78_400, 79_200)
    assert outcome == errors.OOM and "99% of the capacity was reserved" in note
    assert errors.with_memory_state(errors.ERROR, "RuntimeError", CUDNN_INTERNAL, 10, 79_200) == (errors.ERROR, "")
    assert errors.with_memory_state(errors.ERROR, "RuntimeError", CUDNN_INTERNAL, None, 79_200) == (errors.ERROR, "")
    assert errors.with_memory_state(errors.CRASH, "RuntimeError", CUDNN_INTERNAL, 78_400, 79_200) == (errors.CRASH, "")


def test_outcomes_are_distinct():
    assert len(set(errors.OUTCOMES)) == len(errors.OUTCOMES) == 8
    assert errors.TOO_SMALL == "too-small" and errors.TOO_SMALL not in errors.STOPPING
    assert errors.FIT == "fit" and errors.OOM == "oom" and errors.LIMIT == "limit"
    assert errors.CRASH == "crash" and errors.ERROR == "error" and errors.USER_ERROR == "user-error"
    assert set(errors.STOPPING) == {errors.ERROR, errors.USER_ERROR}


# --- sizes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("24GiB", 24 * 2**30),
        ("11GB", 11 * 10**9),
        ("11 GB", 11 * 10**9),
        ("512MiB", 512 * 2**20),
        ("8MiB", 8 * 2**20),
        ("64mib", 64 * 2**20),
        ("1.5g", 3 * 2**29),
        ("1.5G", 3 * 2**29),
        ("0.5KiB", 512),
        ("1024", 1024),
        ("1024b", 1024),
        (" 2 kb ", 2000),
        ("3k", 3 * 1024),
        ("1TiB", 2**40),
        ("2TB", 2 * 10**12),
        (".5M", 2**19),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text, expected", [("2.01KB", 2010), ("2.01MB", 2_010_000), ("4.1GB", 4_100_000_000)])
def test_parse_size_decimal_sizes_are_exact(text, expected):
    # decimal units with a fractional number must not lose a byte to binary floating point
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "GiB", "abc", "-1GiB", "1e3", "5XB", "12 G B", "1,5GiB", None])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_gib():
    assert gib(None) == "-"
    assert gib(3 * 2**29) == "1.5"
    assert gib(2**30, 2) == "1.00"


def test_written_result_file_is_readable_by_others_under_the_umask(tmp_path):
    import stat

    old = os.umask(0o022)
    try:
        path = write_result(sample_result(), tmp_path / "r.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
