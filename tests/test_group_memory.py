"""What a rank of a data-parallel group cannot use, and DDP's bucket rebuild, in `predict --gpus N` (issue 48, item 4).

The memory NCCL takes outside the allocator is measured (memprobe/data/overhead.yaml, group figures, from the
committed multi-GPU scans' out-of-memory errors) and taken off the usable memory; DDP's rebuild of its gradient
buckets before the second step, which the fake process group cannot run, is put into every traced trial.
"""

from __future__ import annotations

import pytest

from memprobe.core.cards.cardsize import card_size
from memprobe.core.cards.catalog import default_catalog
from memprobe.core.cards.overhead import Override, default_overhead_table, usable_memory

torch = pytest.importorskip("torch")

from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.predict.allocator import ALLOC, FREE, MARK  # noqa: E402
from memprobe.predict.data_parallel import World  # noqa: E402
from memprobe.predict.ddp_rebuild import BUCKET_BYTES, FIRST_BUCKET_BYTES, BucketRebuild, bucket_bytes  # noqa: E402
from memprobe.predict.sessions import world_wraps  # noqa: E402
from memprobe.predict.trace import STEP_MARK, TraceSession  # noqa: E402

MIB, GIB = 2**20, 2**30


# --- the memory a rank of a group cannot use ---------------------------------------------------------------------


def test_a_rank_of_a_group_gets_the_capacity_its_scans_recorded_less_what_nccl_took():
    table = default_overhead_table()
    h200 = table.cards["H200 SXM"]
    # the committed 2- and 4-GPU H200 scans: 142169 MiB read at setup, 634 MiB outside the allocator at the errors
    assert 142160 * MIB < h200.group_capacity_bytes < h200.capacity_bytes
    assert 600 * MIB < h200.group_run_overhead_bytes < GIB and h200.group_run_overhead_bytes > h200.run_overhead_bytes
    card = default_catalog().find("H200")
    alone = usable_memory("H200", card_size(card)[0], card)
    group = usable_memory("H200", card_size(card)[0], card, group=True)
    assert group.capacity_bytes == h200.group_capacity_bytes - table.group_run_overhead_bytes
    assert 0.5 * GIB < alone.capacity_bytes - group.capacity_bytes < GIB
    assert "data-parallel group" in group.how and "NCCL" in group.how


def test_a_card_not_scanned_in_a_group_loses_what_a_scanned_card_lost_and_an_override_stands():
    table = default_overhead_table()
    extra = table.group_extra_bytes
    assert extra == max(c.group_extra_bytes for c in table.cards.values()) and 0.5 * GIB < extra < GIB
    a100 = default_catalog().find("A100 80GB SXM4")
    alone = usable_memory(a100.name, card_size(a100)[0], a100)
    group = usable_memory(a100.name, card_size(a100)[0], a100, group=True)
    assert alone.capacity_bytes - group.capacity_bytes == extra and "could not use" in group.how
    given = Override(2 * GIB, "given with --overhead")
    assert usable_memory("24GiB", 24 * GIB, None, given, group=True).capacity_bytes == 22 * GIB


# --- DDP's bucket rebuild ----------------------------------------------------------------------------------------


def test_the_rebuilt_buckets_are_what_torch_assigns():
    # the reducer's own assignment (torch.distributed._compute_bucket_assignment_by_size) on real small tensors
    dist = pytest.importorskip("torch.distributed")
    sizes = [700_000, 300_000, 9_000_000, 4_000_000, 20_000_000, 1_000, 6_000_000, 2_500_000]
    tensors = [torch.empty(n // 4, dtype=torch.float32) for n in sizes]
    order = list(reversed(range(len(tensors))))
    limits = [FIRST_BUCKET_BYTES, BUCKET_BYTES]
    indices, _limits = dist._compute_bucket_assignment_by_size([tensors[i] for i in order], limits, [False] * 8, order)
    expected = [sum(sizes[i] for i in bucket) for bucket in indices]
    assert bucket_bytes((torch.float32, sizes[i]) for i in order) == expected


def test_the_rebuild_allocates_the_new_buckets_before_the_second_step_and_frees_the_first_when_it_ends():
    # the fresh process groups on the GPUs held the first bucket at the second step's peak (ddp_rebuild's docstring)
    rebuild = BucketRebuild([30 * MIB], [MIB, 26 * MIB, 3 * MIB])
    build = [(ALLOC, 7, 30 * MIB, "empty"), (ALLOC, 8, 4096, "empty")]
    assert rebuild.adopt(build) and rebuild.ids == [7]
    step1 = [(MARK, STEP_MARK), (ALLOC, 20, 100, "mm"), (FREE, 20)]
    step2 = [(MARK, STEP_MARK), (ALLOC, 21, 100, "mm"), (FREE, 21)]
    step3 = [(MARK, STEP_MARK), (ALLOC, 22, 100, "mm"), (FREE, 22), (MARK, STEP_MARK)]
    edited = rebuild(step1 + step2 + step3, STEP_MARK)
    assert edited[:3] == step1 and [e[2] for e in edited[3:6]] == [MIB, 26 * MIB, 3 * MIB]
    assert edited[6:9] == step2 and edited[9] == (FREE, 7) and edited[10:] == step3
    two_steps = rebuild(step1 + step2 + [(MARK, STEP_MARK)], STEP_MARK)
    assert two_steps[-2:] == [(FREE, 7), (MARK, STEP_MARK)]  # the second step is the last: freed at its end
    one_step = [*step1, (MARK, STEP_MARK)]
    assert rebuild(step1, STEP_MARK) == step1  # one step, no end mark: nothing rebuilt
    assert len(rebuild(one_step, STEP_MARK)) == len(one_step) + 4  # rebuilt after the last step
    assert not BucketRebuild([5 * MIB], [5 * MIB]).adopt(build)  # no such bucket: the trial is left as traced


def test_a_traced_ddp_trial_holds_the_rebuild_and_keeps_its_last_step_repeatable():
    with world_wraps(World(2, "ddp")) as wrap_for:
        with TraceSession(load_registry()["toy"], wrap=wrap_for("fp32"), fresh=True) as session:
            rebuild = session.trial_edit
            assert isinstance(rebuild, BucketRebuild) and len(rebuild.ids) == 1
            assert sum(rebuild.rebuilt) == sum(rebuild.initial)
            full = session.trace("fp32", 4)
            repeated = session.trace("fp32", 4, repeat_last=True)
    freed_at = [i for i, e in enumerate(full.events) if e[0] == FREE and e[1] in _ids_of(full, rebuild.initial)]
    assert len(freed_at) == 1 and full.step_at[2] >= freed_at[0] > full.step_at[1]  # held through the second step
    rebuilt = [i for i, e in enumerate(full.events) if e[0] == ALLOC and e[3] == "DDP bucket (rebuilt)"]
    assert [full.events[i][2] for i in rebuilt] == rebuild.rebuilt and full.step_at[1] >= rebuilt[-1]
    # the first bucket's free ends the second step, so the third is not the second again byte for byte; the
    # repeat is made before the edit, and gives the trace of every step
    assert not full.last_step_repeats() and repeated.repeated and repeated.events == full.events


def _ids_of(trace, sizes: list[int]) -> set[int]:
    """The ids of the build's allocations of these sizes (the first bucket, renumbered by the trace)."""
    return {e[1] for e in trace.events[: trace.step_at[0]] if e[0] == ALLOC and e[2] in sizes}


# --- the held-out table (benchmarks/multi_heldout.py) ------------------------------------------------------------


def _heldout_module():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "multi_heldout.py"
    spec = importlib.util.spec_from_file_location("multi_heldout", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("safe, says", [(989, "above the measured per-GPU B: 0 of 1"), (991, "1 of 1 (toy ddp)")])
def test_the_held_out_table_sets_each_scan_beside_the_batch_predict_tells(tmp_path, safe, says):
    import json

    from conftest import RecordingProgress
    from fakes import TOY, FakeGroup, fake_group_opts
    from memprobe.probe.distributed.scan import scan_distributed

    job = tmp_path / "h200" / "results" / "toy__gpus2__ddp"
    _result, path = scan_distributed(TOY, fake_group_opts(curve=False), 2, "ddp", job, RecordingProgress(), FakeGroup())
    predicted = {"predicted": 991, "predicted_safe": safe, "predicted_at_capacity": 990}
    (tmp_path / "predictions").mkdir()
    (tmp_path / "predictions" / "laptop.json").write_text(
        json.dumps({"predictions": {"H200/toy__gpus2__ddp": predicted}})
    )
    heldout = _heldout_module()
    heldout.ROOT = tmp_path  # links relative to the folder here
    heldout.main(["--folder", str(tmp_path), "--no-predict"])
    text = (tmp_path / "accuracy.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| h200 | toy | ddp |"))
    assert "990](" in row and "(2 of 2)" in row and "991 (+0.1%) **over**" in row
    assert says in text and json.loads((tmp_path / "accuracy.json").read_text())[0]["max_batch"] == 990


# --- every committed multi-GPU scan against the safe batch predict tells ---------------------------------------


def test_no_committed_multi_gpu_scan_trained_fewer_than_the_safe_batch_predict_tells():
    """reports/calibration_multi_gpu.json (benchmarks/calibration.py) predicts each multi-GPU workload, precision,
    strategy and world size at the usable memory `predict --gpus N --gpu CARD` takes; every committed scan of it, in
    every folder, must have trained at least that safe batch per GPU."""
    import json
    from pathlib import Path

    from memprobe.compare.scaling import strategy, world_size
    from memprobe.core.records.results import load_results

    repo = Path(__file__).resolve().parents[1]
    rows = json.loads((repo / "reports" / "calibration_multi_gpu.json").read_text())["rows"]
    multi = [r for r in rows if r.get("world_size", 1) > 1]
    safe = {(r["gpu"], r["workload"], r["precision"], r["strategy"], r["world_size"]): r["safe"] for r in multi}
    for r in multi:  # made at the usable memory predict takes now (overhead.yaml's group figures)
        card = default_catalog().find(r["gpu"])
        assert r["capacity_gib"] == round(
            usable_memory(card.name, card_size(card)[0], card, group=True).capacity_bytes / GIB, 2
        )
    checked = 0
    for path, result in load_results([repo / "reports"], strict_files=False):
        n = world_size(result)
        for name, p in result.precisions.items():
            key = (result.gpu_name(), str(result.workload.name), name, strategy(result), n)
            if n < 2 or p.status != "done" or p.max_batch is None or key not in safe:
                continue
            assert safe[key] <= p.max_batch, f"{path}: safe {safe[key]} above the measured {p.max_batch}"
            checked += 1
    assert checked >= 30


def test_no_committed_held_out_multi_gpu_scan_trained_fewer_than_its_safe_batch():
    """reports/multi_heldout/accuracy.json (benchmarks/multi_heldout.py): each held-out 2-GPU scan beside the safe batch
    `predict --gpus 2 --strategy S --gpu CARD` tells; none may be above the measured per-GPU B."""
    import json
    from pathlib import Path

    rows = json.loads((Path(__file__).resolve().parents[1] / "reports" / "multi_heldout" / "accuracy.json").read_text())
    scanned = [r for r in rows if r["max_batch"] and r["safe"]]
    assert len(scanned) >= 3
    for r in scanned:
        assert r["safe"] <= r["max_batch"], f"{r['file']}: safe {r['safe']} above the measured {r['max_batch']}"
