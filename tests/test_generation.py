"""LLM generation with a static KV cache (workloads/generation.py) on a tiny Llama: memprobe's greedy loop against
transformers' own generate, chunked prefill, the cache's size, the loop on fake tensors, and bad settings.

The tiny Llama (toy-llama: hidden 64, 2 layers, 4 heads, 2 KV heads, vocab 256) runs the same code as llama-1b and
llama-8b. Its weights are redrawn wider than their initialisation (std 0.3) so that greedy tokens change from one
step to the next: with the default initialisation every sequence repeats one token, and a loop that did not feed its
tokens back would pass a comparison.
"""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.workload.registry import load_registry  # noqa: E402
from torchvision_standin import forget, install_standin, torchvision_usable  # noqa: E402

TOY = load_registry()["toy-llama"]
PROMPT, NEW = 12, 9


@pytest.fixture(autouse=True, scope="module")
def modules():
    """memprobe.workloads.llm and .generation importable (the real torchvision if it works, else the stand-in)."""
    finder = None if torchvision_usable() else install_standin()
    try:
        from memprobe.workloads import generation, llm

        yield llm, generation
    finally:
        if finder is not None:
            sys.meta_path.remove(finder)
            forget(("torchvision",))


def generate_params(prompt=PROMPT, new=NEW, chunk=None, **more):
    return {**TOY.params, "generate": {"prompt_len": prompt, "new_tokens": new, "prefill_chunk": chunk}, **more}


def build(modules, precision="fp32", **settings):
    llm, _ = modules
    torch.manual_seed(0)
    task = llm.build(generate_params(**settings), TOY.optimizer, torch.device("cpu"), precision)
    with torch.no_grad():
        for p in task.model.parameters():
            p.normal_(0.0, 0.3)
    return task


def test_greedy_loop_gives_the_tokens_of_transformers_generate(modules):
    task = build(modules)
    prompts = task.make_batch(3)
    ours = task.generate_step(prompts)
    assert ours.shape == (3, NEW) and ours.dtype == torch.long
    assert len({tuple(row) for row in ours.tolist()}) == 3 and any(len(set(row)) > 2 for row in ours.tolist())
    with torch.inference_mode():
        theirs = task.model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),  # every prompt token is real (generate would take 0 for padding)
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            cache_implementation="static",
            eos_token_id=None,
            pad_token_id=0,
        )
    assert torch.equal(ours, theirs[:, PROMPT:])


@pytest.mark.parametrize("chunk", [1, 5, PROMPT])
def test_chunked_prefill_gives_the_same_tokens(modules, chunk):
    _, generation = modules
    task = build(modules)
    prompts = task.make_batch(2)
    with torch.inference_mode():
        chunked = generation.greedy_generate(task.model, prompts, NEW, prefill_chunk=chunk)
    assert torch.equal(chunked, task.generate_step(prompts))


def test_chunked_prefill_gives_the_tokens_of_generates_own(modules):
    """transformers' generate prefills in chunks itself (`prefill_chunk_size`, in 5.17 and later): the same tokens."""
    _, generation = modules
    task = build(modules)
    if not hasattr(task.model.generation_config, "prefill_chunk_size"):
        pytest.skip("this transformers has no prefill_chunk_size")
    prompts = task.make_batch(2)
    with torch.inference_mode():
        ours = generation.greedy_generate(task.model, prompts, NEW, prefill_chunk=5)
        theirs = task.model.generate(
            prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            cache_implementation="static",
            eos_token_id=None,
            pad_token_id=0,
            prefill_chunk_size=5,
        )
    assert torch.equal(ours, theirs[:, PROMPT:])


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_weights_are_in_the_precision_dtype_and_the_cache_is_sized_by_the_config(modules, precision):
    _, generation = modules
    dtype = generation.WEIGHT_DTYPES[precision]
    task = build(modules, precision)
    assert {p.dtype for p in task.model.parameters()} == {dtype}
    cache = generation.new_static_cache(task.model, 3, PROMPT + NEW, early=False)
    with torch.inference_mode():
        task.model(
            input_ids=task.make_batch(3),
            use_cache=True,
            logits_to_keep=1,
            **{generation.cache_keyword(task.model): cache},
        )
    allocated = sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)
    config = task.model.config
    assert allocated == generation.static_cache_bytes(config, dtype, 3, PROMPT + NEW)
    # 2 (keys, values) x 2 layers x 2 KV heads x 16 wide x the dtype's bytes, per token of one sequence
    assert generation.kv_bytes_per_token(config, dtype) == 2 * 2 * 2 * 16 * dtype.itemsize
    assert allocated == 3 * (PROMPT + NEW) * generation.kv_bytes_per_token(config, dtype)
    assert task.describe()["kv_bytes_per_token"] == generation.kv_bytes_per_token(config, dtype)


def test_a_sliding_window_layer_holds_at_most_its_window(modules):
    _, generation = modules
    from transformers import MistralConfig

    config = MistralConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, sliding_window=8
    )
    full = generation.static_cache_bytes(config, torch.float32, 1, 8)
    assert generation.static_cache_bytes(config, torch.float32, 1, 100) == full  # never more than the window
    assert generation.kv_bytes_per_token(config, torch.float32) == 0  # every layer slides: no per-token cost


def test_the_loop_runs_on_fake_tensors_and_allocates_the_cache_it_is_sized_for(modules):
    """What predict traces: the tiny Llama built and generating under fake tensors with the CUDA emulation, every
    allocation recorded. The KV cache's keys and values appear as allocations of batch x KV heads x (P + N) x head
    width, one pair per layer, and the loop stops after the decode forwards it is asked for."""
    llm, generation = modules
    from memprobe.predict.fakecuda import H100
    from memprobe.predict.recorder import Recorder
    from memprobe.predict.session import fake_session

    batch = 3
    with fake_session(H100), Recorder(H100) as rec:
        task = llm.build(generate_params(), TOY.optimizer, torch.device("cpu"), "bf16")
        prompts = task.make_batch(batch)
        points: list[str] = []
        task.mark, task.decode_steps = points.append, 2
        out = task.generate_step(prompts)
        assert out.shape == (batch, NEW)
    assert points == [generation.PREFILL, generation.DECODE, generation.DECODE, generation.END]
    one_layer_keys = batch * 2 * (PROMPT + NEW) * 16 * 2  # bf16
    sizes = [e[2] for e in rec.events if e[0] == "alloc"]
    assert sizes.count(one_layer_keys) >= 2 * 2  # keys and values of both layers


def test_settings_are_checked(modules):
    llm, generation = modules
    with pytest.raises(ValueError, match="at least 1 new token"):
        generation.GenerationSettings.from_params(generate_params(new=0))
    with pytest.raises(ValueError, match="prefill chunk"):
        generation.GenerationSettings.from_params(generate_params(chunk=0))
    assert generation.GenerationSettings.from_params(TOY.params) is None
    with pytest.raises(ValueError, match="131072 positions"):
        llm.build(generate_params(prompt=131072, new=1), TOY.optimizer, torch.device("meta"), "bf16")


def test_generate_mode_on_a_task_that_does_not_generate_is_an_error(modules):
    from memprobe.training.step import run_step
    from memprobe.workloads.base import Amp
    from memprobe.workloads.toy import build as build_toy

    toy = load_registry()["toy"]
    task = build_toy(toy.params, toy.optimizer, torch.device("cpu"))
    with pytest.raises(RuntimeError, match="does not generate"):
        run_step(task, Amp("fp32", torch.device("cpu")), task.make_batch(2), "generate")
