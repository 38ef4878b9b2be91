"""What every workload provides to the trial runner: a model on a device, synthetic inputs, one step.

A training step is forward, loss, backward, optimizer step, zero_grad(set_to_none=True), run under
the precision's autocast and GradScaler. Workloads with more than one optimizer (GANs) override
`train_step`; everything else only says how to make a batch and compute the loss.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Any, Iterator

import torch

from memprobe.core.process.outcomes import ERROR, classify_error, message_of

AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


class UserModelError(Exception):
    """The model asked for cannot be built as given (an unknown timm name, a bad task, a user build
    that raised or returned the wrong thing): the user must change something; outcome `user-error`.
    `details` holds the user code's traceback where there is one."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


def model_error(exc: BaseException) -> bool:
    """Whether an exception a model's build or step raised is the model's own error (its config, its code), not out
    of memory, a kernel's limit or a crash, which are the GPU's and are raised as they are (core/process/outcomes.py)."""
    return classify_error(type(exc).__name__, message_of(exc)) == ERROR


def one_line(exc: BaseException, most: int = 300) -> str:
    """An exception's message on one line, every word kept (libraries' messages run over several), at most `most`
    characters."""
    return " ".join(message_of(exc).split())[:most]


class Amp:
    """The precision's autocast context and loss scaling. fp32/tf32 run without autocast.

    fp16 uses a GradScaler (one per trial, shared by all optimizers of a step), as mixed-precision
    training needs; bf16 does not need one. `loss_scale` starts the scaler at a scale an earlier
    trial settled at (a long run's steady state) instead of 2**16, from which a randomly initialised
    model can skip many updates while the scale backs off.
    """

    def __init__(
        self,
        precision: str,
        device: torch.device,
        loss_scale: float | None = None,
        scaler_class: type | None = None,
    ) -> None:
        """`scaler_class`: the loss scaler (default torch.amp.GradScaler); a model whose gradients are sharded
        (FSDP) needs one that agrees on skipped steps across ranks (TrainTask.scaler_class, set by the wrap)."""
        self.precision = precision
        self.device = device
        self.dtype = AUTOCAST_DTYPES.get(precision)
        use_scaler = precision == "fp16"
        self.scaler = None
        if use_scaler:
            scaler = scaler_class or torch.amp.GradScaler
            self.scaler = scaler(device.type, init_scale=float(loss_scale or 2.0**16))
        # While `track` is on, count the steps whose optimizer update was applied or skipped: the
        # GradScaler skips updates (and so creates no optimizer state) while it backs off from its
        # initial scale. Tracking reads the scale back, a host sync, so timed steps leave it off.
        self.track = False
        self.applied = 0
        self.skipped = 0

    @classmethod
    def for_task(cls, task: Any, precision: str, loss_scale: float | None = None) -> "Amp":
        """The Amp of a step of `task` on its device, with the loss scaler its wrapper asked for
        (TrainTask.scaler_class; a task that has none gets the default)."""
        return cls(precision, task.device, loss_scale, getattr(task, "scaler_class", None))

    @property
    def loss_scale(self) -> float | None:
        """The scaler's current scale (a host sync), or None without loss scaling."""
        return None if self.scaler is None else float(self.scaler.get_scale())

    def autocast(self):
        if self.dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if self.scaler is not None:
            self.scaler.step(optimizer)
        else:
            optimizer.step()

    def update(self) -> None:
        """End a step: update the loss scale; with `track`, count the step as applied or skipped."""
        if self.scaler is None:
            self.applied += 1
            return
        before = self.scaler.get_scale() if self.track else 0.0
        self.scaler.update()
        if self.track:
            if self.scaler.get_scale() < before:
                self.skipped += 1
            else:
                self.applied += 1


_cuda_stand_in = False  # cuda_stand_in() is active: CPU tensors stand for CUDA ones


@contextmanager
def cuda_stand_in() -> Iterator[None]:
    """While active, a model built on the CPU device takes the choices a workload makes for CUDA (`on_cuda`): what
    predict's fake CPU tensors stand for is a CUDA device, whose layouts (channels_last) change what a step
    allocates (the channels_last copy of an image batch: 23 GB for levit_256 at batch 38,000)."""
    global _cuda_stand_in
    before, _cuda_stand_in = _cuda_stand_in, True
    try:
        yield
    finally:
        _cuda_stand_in = before


def on_cuda(device: torch.device) -> bool:
    """Whether a workload built on `device` makes its CUDA choices: on CUDA, or on the CPU inside cuda_stand_in()."""
    return device.type == "cuda" or (device.type == "cpu" and _cuda_stand_in)


def make_optimizer(params, spec: dict[str, Any], device: torch.device) -> torch.optim.Optimizer:
    """Build the optimizer a careful user would: fused Adam/AdamW on CUDA, foreach elsewhere and for SGD.

    Raises ValueError for an unknown optimizer name (the registry validates names first).
    """
    name = spec["name"]
    lr = float(spec.get("lr", 1e-3))
    fast = {"fused": True} if device.type == "cuda" else {"foreach": True}
    if name == "adamw":
        return torch.optim.AdamW(
            params,
            lr=lr,
            betas=tuple(spec.get("betas", (0.9, 0.999))),
            weight_decay=float(spec.get("weight_decay", 0.01)),
            **fast,
        )
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=tuple(spec.get("betas", (0.9, 0.999))), **fast)
    if name == "sgd":
        # Never fused: fused SGD takes over the GradScaler's overflow handling and still advances its
        # momentum on the steps the scaler skips, so one fp16 overflow writes inf into the momentum
        # (on the H100, torch 2.11: resnet50 fp16 had all 35 updates skipped). Fused Adam/AdamW skip.
        return torch.optim.SGD(
            params,
            lr=lr,
            momentum=float(spec.get("momentum", 0.9)),
            weight_decay=float(spec.get("weight_decay", 0.0)),
            foreach=True,
        )
    raise ValueError(f"unknown optimizer '{name}'")


def model_config(model: torch.nn.Module) -> Any:
    """A transformers model's config (torch types a module's other attributes as tensors or modules)."""
    return model.config


def materialize(model: torch.nn.Module, device: torch.device, init) -> None:
    """Give a model built on the meta device real storage on `device` and initialise it there.

    Initialising hundreds of millions of parameters on the host takes ~10 s per process, and every
    fresh-process check pays it; on the GPU it takes a fraction of a second. `init` must set every
    parameter and buffer (transformers' init_weights does). Raises RuntimeError if any parameter is
    left non-finite.
    """
    model.to_empty(device=device)
    with torch.no_grad():
        init()
    bad = [name for name, p in model.named_parameters() if p.is_floating_point() and not torch.isfinite(p).all()]
    if bad:
        raise RuntimeError(f"initialisation left non-finite parameters: {', '.join(bad[:3])}")


class TrainTask:
    """A model built on a device with its synthetic inputs. Subclasses implement make_batch and loss."""

    unit = "samples"
    # Submodules that --compile runs through torch.compile; empty: the model itself.
    compile_targets: tuple[str, ...] = ()
    # Built by the user's own code (workloads/user_module.py): a step's error is theirs, shown with its traceback.
    user_code = False

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer_spec: dict[str, Any],
        device: torch.device,
        units_per_sample: float = 1.0,
    ) -> None:
        self.compiled: list[str] = []
        self.model = model
        self.optimizer_spec = optimizer_spec
        self.device = device
        self.units_per_sample = units_per_sample
        self.optimizers: list[torch.optim.Optimizer] = []
        # The loss scaler for fp16 (None: torch.amp.GradScaler). training/wrap.py's FSDP sets
        # ShardedGradScaler here, on this task only: each rank sees only its shard of the gradients.
        self.scaler_class: type | None = None

    # -- to implement -------------------------------------------------------------------------
    def make_batch(self, n: int) -> Any:
        """Synthetic worst-case inputs for batch n, on the device."""
        raise NotImplementedError

    def loss(self, batch: Any) -> torch.Tensor:
        """Forward pass and loss (called inside autocast)."""
        raise NotImplementedError

    def infer(self, batch: Any) -> Any:
        """Forward pass only, for --mode infer."""
        raise NotImplementedError(
            f"{type(self).__name__} defines no infer(batch): --mode infer runs the forward pass it returns "
            "(def infer(self, batch): return self.model(...))"
        )

    # -- shared -------------------------------------------------------------------------------
    def compile(self) -> list[str]:
        """Run the forward of the model (or of each of `compile_targets`) through torch.compile, in
        place: the parameters, and so the optimizers built on them, stay the same objects; backward
        is compiled with it (AOTAutograd). Returns the compiled modules' names."""
        for name in self.compile_targets or ("",):
            (self.model.get_submodule(name) if name else self.model).compile()
        self.compiled = list(self.compile_targets) or [type(self.model).__name__]
        return self.compiled

    def start(self) -> None:
        """Create fresh optimizer state for a trial (it appears at the first optimizer step)."""
        self.model.train()
        self.optimizers = [make_optimizer(self.model.parameters(), self.optimizer_spec, self.device)]

    def stop(self) -> None:
        """Drop optimizer state and gradients so the next trial starts from the weights alone."""
        self.optimizers = []
        for p in self.model.parameters():
            p.grad = None

    def train_step(self, batch: Any, amp: Amp) -> torch.Tensor:
        (optimizer,) = self.optimizers
        with amp.autocast():
            loss = self.loss(batch)
        amp.backward(loss)
        amp.step(optimizer)
        amp.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def infer_step(self, batch: Any, amp: Amp) -> Any:
        self.model.eval()
        with torch.inference_mode(), amp.autocast():
            return self.infer(batch)

    def describe(self) -> dict[str, Any]:
        """Settings that affect memory or speed, recorded in the result."""
        opt = self.optimizers[0] if self.optimizers else None
        return {
            "parameters": sum(p.numel() for p in self.model.parameters()),
            "optimizer": type(opt).__name__ if opt else self.optimizer_spec["name"],
            "optimizer_fused": bool(opt.defaults.get("fused")) if opt else self.device.type == "cuda",
            "units_per_sample": self.units_per_sample,
            "compiled": self.compiled or None,
        }
