"""Enter fake tensors plus the CUDA emulation, for building a workload and running its steps with no GPU."""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from memprobe.predict.fake_mode import FakeCudaMode
from memprobe.predict.fakecuda import H100, CudaBehaviour, FakeTensorMode, Target
from memprobe.predict.fast_fake import FastFakeTensorMode
from memprobe.predict.torch_internals import internal, require_internals

_get_current_dispatch_mode_stack = internal("torch.utils._python_dispatch._get_current_dispatch_mode_stack")


@contextmanager
def fake_session(target: Target = H100) -> Iterator[tuple[FakeTensorMode, CudaBehaviour]]:
    """Fake tensors plus the CUDA emulation, for building a workload and running its steps.

    Inside, tensor creation yields fake tensors (no memory, no compute). Module.to_empty/.to swap a
    fake parameter's contents (swap_tensors), which refuses tensors with weak references; the fake
    mode's converter memo holds one for every Parameter made from a fake tensor, so the memo is
    cleared before each swap (it only maps real tensors to fakes, and there are no real tensors here),
    and active FakeCudaModes are told to drop theirs (before_swap / after_swap).
    """
    require_internals()
    fake = FastFakeTensorMode()
    original_swap = torch.utils.swap_tensors

    def swap(t1, t2):
        watchers = [m for m in _get_current_dispatch_mode_stack() if isinstance(m, FakeCudaMode)]
        for m in watchers:
            m.before_swap(t1, t2)
        fake.fake_tensor_converter.meta_converter.tensor_memo.clear()
        original_swap(t1, t2)
        for m in watchers:
            m.after_swap(t1, t2)

    torch.utils.swap_tensors = swap
    restore = _treat_fakes_as_eager() + _deepcopy_in_this_mode() + _quiet_fake_tensor_log()
    # A function a library scripts (deberta-v2's position buckets: @torch.jit.script) runs in the TorchScript
    # interpreter, whose torch.tensor(...) makes a real tensor that fake tensors refuse. Scripting is off inside the
    # session, so a module imported here (transformers imports a model's module when it is first built) keeps its
    # Python functions: the same ops.
    jit_was_on = bool(internal("torch.jit._state._enabled"))
    internal("torch.jit._state.disable")()
    try:
        with CudaBehaviour(target) as behaviour, fake:
            yield fake, behaviour
    finally:
        torch.utils.swap_tensors = original_swap
        for module, name, value in restore:
            setattr(module, name, value)
        if jit_was_on:
            internal("torch.jit._state.enable")()


def _quiet_fake_tensor_log() -> list[tuple[Any, str, Any]]:
    """Keep torch's fake-tensor logger from printing a traceback for an op whose meta kernel fails.

    It logs every such failure at ERROR level with its stack ("failed while attempting to run meta for ..."), dozens
    of lines on the terminal, before the exception reaches memprobe, which reports it in one line (PredictError).
    Returns what to restore."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    restore = [(log, "disabled", log.disabled)]
    log.disabled = True
    return restore


def _deepcopy_in_this_mode() -> list[tuple[Any, str, Any]]:
    """Make copy.deepcopy of a fake tensor (a fake Parameter too) give one of the session's own fake mode.

    Tensor.__deepcopy__ copies a fake tensor's storage outside the mode, and the copy comes out in another
    FakeTensorMode; moving it later fails ("Mixing fake modes", seen as "Couldn't swap ...weight" from
    Module.to). nn.TransformerEncoder deep-copies its layer, so user models built from it need this. The
    values do not matter here (random weights, fake tensors), only shape, dtype, layout and the mode.
    Returns what to restore.
    """
    fake_tensor = internal("torch._subclasses.fake_tensor.FakeTensor")
    original = fake_tensor.__deepcopy__

    def deepcopy(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            result = torch.empty_like(self, memory_format=torch.preserve_format)
        if getattr(self, "_is_param", False):
            result = torch.nn.Parameter(result, self.requires_grad)
        else:
            result.requires_grad_(self.requires_grad)
        memo[id(self)] = result
        return result

    fake_tensor.__deepcopy__ = deepcopy
    return [(fake_tensor, "__deepcopy__", original)]


def _treat_fakes_as_eager() -> list[tuple[Any, str, Any]]:
    """Make libraries that take fake tensors for graph tracing treat them as eager tensors.

    transformers (is_tracing -> is_fake_tensor) keeps an all-ones attention mask when it sees a fake
    tensor, instead of checking `mask.all()` and dropping it as it does in eager mode on a GPU; a kept
    mask forces memory-efficient attention with a (batch, 1, seq, seq) bias saved in every layer. The
    fake tensors here stand for eager CUDA tensors, and FakeCudaMode answers `.all()`. Returns what to
    restore.
    """
    restore = []
    utils = sys.modules.get("transformers.utils.import_utils")
    if utils is not None:
        # A transformers without is_fake_tensor may still treat fake tensors as traced: refuse, naming it.
        require_internals(("transformers",))
        # is_fake_tensor: in the transformers releases require_internals accepts, not in every one typed here
        restore.append((utils, "is_fake_tensor", utils.is_fake_tensor))
        utils.is_fake_tensor = lambda x: False  # type: ignore[attr-defined]
    return restore
