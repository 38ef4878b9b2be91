"""Resolve model names outside the registry (timm:NAME, hf:NAME, hf-config:PATH, FILE.py:FUNC, pkg.mod:FUNC) into Workloads.

No torch here: the names are checked and turned into serialisable registry entries (families `timm`,
`hf`, `module`) in the parent; the models are built only in trial processes and by `predict`.
A transformers config is read from a JSON file that ships with memprobe (memprobe/data/hf_configs),
from the local Hugging Face cache, or from a path: nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import re
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from memprobe.core.files.inputs import read_text
from memprobe.core.workload.family_params import check_params
from memprobe.core.workload.registry import OPTIMIZERS, RegistryError, Workload, match

CUSTOM_FAMILIES = ("timm", "hf", "module")
# Config keys that hold a size or a count (hidden_size, num_hidden_layers, n_head, ...): never negative.
_SIZE_KEY = re.compile(r"^(num_|n_)|(_size|_layers|_heads|_dim|_embeddings|_positions)$")
# Of those, the ones a model cannot have zero of (transformers builds a model with no layers without a word).
_LAYER_KEYS = {"num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers"}
_NOT_ZERO_KEYS = {
    *_LAYER_KEYS,
    *("num_attention_heads", "n_head", "n_heads", "encoder_attention_heads", "decoder_attention_heads"),
    *("hidden_size", "n_embd", "d_model", "vocab_size"),
}
# Layer counts past this are typos: the deepest published transformers have a few hundred layers, and building
# each layer (on fake tensors too) takes milliseconds to seconds.
MAX_LAYERS = 10_000
# Said after the known registry names when a name matches none of them.
REGISTRY_HINT = "; or timm:NAME, hf:NAME, hf-config:PATH, FILE.py:FUNCTION, package.module:FUNCTION"
HF_TASKS = ("causal-lm", "masked-lm", "seq-cls", "qa", "seq2seq")
HF_UNITS = "sequences"
# Optimizers used unless --optimizer says otherwise: what the registry's own workloads of each kind use.
DEFAULT_OPTIMIZERS: dict[str, dict[str, Any]] = {
    "sgd": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1.0e-4},
    "adam": {"name": "adam", "lr": 1.0e-4, "betas": [0.9, 0.999]},
    "adamw": {"name": "adamw", "lr": 1.0e-4, "weight_decay": 0.01, "betas": [0.9, 0.999]},
}
_FAMILY_OPTIMIZER = {"timm": "sgd", "hf": "adamw", "module": "adamw"}
# Suffixes of files that are not Python modules, named where FILE.py belongs: said so, not looked up as a package.
_FILE_SUFFIXES = {"txt", "ipynb", "json", "yaml", "yml", "pt", "pth", "bin", "pyc", "md", "cfg", "sh"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


class CustomModelError(RegistryError):
    """A model name or entry outside the registry cannot be used (one line, saying what to do)."""


@dataclass(frozen=True)
class CustomOptions:
    """Options that shape a model given by name: timm input size, hf task and sequence length, optimizer."""

    input_size: tuple[int, int, int] | None = None
    optimizer: str | None = None
    task: str | None = None
    seq_len: int | None = None

    def unused_by(self, family: str) -> list[str]:
        """The options given that a model of this family ignores (to refuse them, not drop them silently)."""
        applies = {
            "timm": ("input_size", "optimizer"),
            "hf": ("task", "seq_len", "optimizer"),
            "module": ("optimizer",),
        }.get(family, ())
        return [
            name
            for name in ("input_size", "task", "seq_len", "optimizer")
            if getattr(self, name) is not None and name not in applies
        ]


def is_custom_name(text: str) -> bool:
    """True when `text` names a model outside the registry (it has a `kind:` prefix or a module:function)."""
    return ":" in text


# An image side past this (64K pixels, 4 Gpixel images) is a typo, not a training input.
MAX_IMAGE_SIDE = 65536
MAX_CHANNELS = 4096


def parse_input_size(text: str) -> tuple[int, int, int]:
    """'3,384,384' -> (3, 384, 384). Raises ValueError, also past MAX_CHANNELS channels or MAX_IMAGE_SIDE pixels."""
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"expected C,H,W (e.g. 3,224,224), got '{text}'") from None
    if len(values) != 3 or min(values) < 1:
        raise ValueError(f"expected three positive integers C,H,W (e.g. 3,224,224), got '{text}'")
    if values[0] > MAX_CHANNELS or max(values[1:]) > MAX_IMAGE_SIDE:
        raise ValueError(f"C,H,W must be at most {MAX_CHANNELS},{MAX_IMAGE_SIDE},{MAX_IMAGE_SIDE}, got '{text}'")
    return values


# --- transformers configs ----------------------------------------------------------------------


def packaged_hf_configs() -> dict[str, Path]:
    """Names of the transformers configs shipped with memprobe, and their files."""
    folder = Path(str(resources.files("memprobe").joinpath("data").joinpath("hf_configs")))
    return {p.stem: p for p in sorted(folder.glob("*.json"))}


def _cached_hf_config(name: str) -> Path | None:
    """config.json of a Hugging Face repo already in the local cache (no network), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - a name the hub library refuses is simply not cached
        return None
    return Path(found) if isinstance(found, str) else None


def load_hf_config(source: str, is_path: bool | None = None) -> tuple[dict[str, Any], str]:
    """A transformers config as a dict, and where it came from: a name (packaged, or in the local Hugging
    Face cache) or a path to config.json or its folder. `is_path` None: a path when it ends in .json or exists.

    Raises CustomModelError (one line) when there is no local config or it is not a config file.
    """
    path = Path(source).expanduser()
    if is_path is None:
        is_path = source.endswith(".json") or path.exists()
    if is_path:
        if path.is_dir():
            path = path / "config.json"
        where = str(path)
    else:
        packaged = packaged_hf_configs()
        found = packaged.get(source) or _cached_hf_config(source)
        if found is None:
            raise CustomModelError(
                f"no local transformers config for '{source}' (memprobe downloads nothing; packaged: "
                f"{', '.join(packaged)}): save its config.json and give it as --model hf-config:PATH/config.json"
            )
        path = found
        where = f"packaged {path.name}" if source in packaged else f"Hugging Face cache {path}"
    try:
        config = json.loads(read_text(path))
    except OSError as exc:
        raise CustomModelError(f"{path}: cannot read the config ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CustomModelError(f"{path}: not a JSON config ({exc})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise CustomModelError(f"{path}: not a transformers config (no 'model_type')")
    if not isinstance(config["model_type"], str):
        raise CustomModelError(
            f"{path}: 'model_type' is {repr(config['model_type'])[:40]}, not a string: give the transformers model "
            'type in quotes (e.g. "model_type": "bert")'
        )
    problem = _config_problem(config)
    if problem:
        raise CustomModelError(f"{path}: {problem}")
    return config, where


def _config_problem(config: dict[str, Any]) -> str:
    """What is wrong with a config's sizes and counts, before transformers sees them, or "". transformers builds a
    model from a negative or zero layer count (no layers: a prediction of nothing, not an error) and answers a
    fractional one with a message whose first line names the field and nothing else."""
    for key, value in config.items():
        if not _SIZE_KEY.search(key) or isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
            continue
        if isinstance(value, str):
            return f"'{key}' is {value!r}, a string; a size or count is a number: write it without quotes"
        if isinstance(value, float):
            low = max(0, math.floor(value)) if math.isfinite(value) else 1
            return f"'{key}' is {value!r}; a size or count is a whole number (e.g. {low} or {low + 1})"
        # -1 is transformers' "not set" for optional sizes (deberta-v2's max_relative_positions: the model's own)
        if isinstance(value, int) and value < 0 and not (value == -1 and key not in _NOT_ZERO_KEYS):
            return f"'{key}' is {value}; a size or count cannot be negative"
        if isinstance(value, int) and value == 0 and key in _NOT_ZERO_KEYS:
            return f"'{key}' is 0; a model needs at least 1 (a layer, a head, a hidden unit)"
        if isinstance(value, int) and value > MAX_LAYERS and key in _LAYER_KEYS:
            return (
                f"'{key}' is {value:,}; no model has more than {MAX_LAYERS:,} layers (building them would take hours)"
            )
    return ""


# --- module:function targets ------------------------------------------------------------------


def check_target(target: str) -> str:
    """Check a `FILE.py:FUNC` or `pkg.mod:FUNC` target without importing it; return it with FILE made absolute.

    Raises CustomModelError when the file or package is missing or the function name is malformed.
    """
    module, sep, function = target.rpartition(":")
    if not sep or not module or not _IDENTIFIER.fullmatch(function):
        raise CustomModelError(f"'{target}': expected FILE.py:FUNCTION or package.module:FUNCTION")
    if module.endswith(".py"):
        path = Path(module).expanduser()
        if not path.is_file():
            where = "" if path.is_absolute() else f" (relative paths are read from the working folder, {Path.cwd()})"
            raise CustomModelError(f"'{target}': no file {path}{where}")
        return f"{path.resolve()}:{function}"
    path = Path(module).expanduser()
    if "/" in module or path.is_file() or (path.suffix and path.suffix[1:] in _FILE_SUFFIXES):
        # model.txt, notebook.ipynb, ./model: a file, but not one Python imports
        raise CustomModelError(
            f"'{target}': {module} is not a .py file; memprobe imports the build function from FILE.py:FUNCTION "
            "(copy the code into a .py file)"
        )
    if not _IDENTIFIER.fullmatch(module):
        raise CustomModelError(f"'{target}': '{module}' is neither a .py file nor a module name")
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise CustomModelError(
            f"'{target}': no module named '{module.split('.')[0]}' is importable here (a file: FILE.py:FUNCTION)"
        )
    return f"{module}:{function}"


def target_of(build_fn: Callable[..., Any]) -> str:
    """The `module:qualname` (or `FILE.py:qualname` for a script run as __main__) a trial process imports
    `build_fn` by. Raises CustomModelError for a function defined where no process can import it."""
    qualname = getattr(build_fn, "__qualname__", "")
    module = getattr(build_fn, "__module__", None)
    if not callable(build_fn) or not qualname or "<" in qualname or module is None:
        raise CustomModelError(
            f"{build_fn!r} cannot be imported by a trial process: give a top-level function "
            "of an importable module (or its 'module:function' name)"
        )
    if module == "__main__":
        main_file = getattr(inspect.getmodule(build_fn), "__file__", None)
        if not main_file:
            raise CustomModelError(
                f"{qualname} is defined in a notebook or an interactive session, which a trial "
                "process cannot import: move it into a .py file and pass 'FILE.py:function'"
            )
        return f"{Path(main_file).resolve()}:{qualname}"
    return f"{module}:{qualname}"


# --- names and entries -> Workloads ------------------------------------------------------------


def _optimizer(family: str, options: CustomOptions) -> dict[str, Any]:
    name = options.optimizer or _FAMILY_OPTIMIZER[family]
    if name not in OPTIMIZERS:
        raise CustomModelError(f"unknown optimizer '{name}' (known: {', '.join(OPTIMIZERS)})")
    return dict(DEFAULT_OPTIMIZERS[name])


def resolve(text: str, options: CustomOptions = CustomOptions()) -> Workload:
    """The Workload for one name outside the registry. Raises CustomModelError (one line)."""
    kind, _, rest = text.partition(":")
    if kind == "timm":
        if not rest:
            raise CustomModelError("timm: needs a model name, e.g. timm:convnext_large")
        params: dict[str, Any] = {
            "model": rest,
            "input_size": list(options.input_size) if options.input_size else None,
            "channels_last": True,
        }
        return _checked(
            Workload(text, "timm", f"timm {rest}, random weights, CE", "images", params, _optimizer("timm", options)),
            options,
        )
    if kind in ("hf", "hf-config"):
        if not rest:
            raise CustomModelError(f"{kind}: needs a {'name' if kind == 'hf' else 'path'}, e.g. hf:gpt2-large")
        if kind == "hf-config":
            rest = str(Path(rest).expanduser().resolve())
        params = {
            "config": rest,
            "config_is_path": kind == "hf-config",
            "task": options.task or "causal-lm",
            "seq_len": options.seq_len,
        }
        return _checked(
            Workload(
                text, "hf", f"transformers {rest}, random weights, sdpa", HF_UNITS, params, _optimizer("hf", options)
            ),
            options,
        )
    params = {"target": text}
    return _checked(
        Workload(text, "module", f"user build {text}", "samples", params, _optimizer("module", options)), options
    )


def _checked(workload: Workload, options: CustomOptions) -> Workload:
    unused = options.unused_by(workload.family)
    if unused:
        flags = ", ".join("--" + u.replace("_", "-") for u in unused)
        raise CustomModelError(f"{flags} do(es) not apply to {workload.name}")
    return prepare(workload)


def prepare(workload: Workload) -> Workload:
    """Check a workload of a custom family (from a name or models.yaml) and make it self-contained: an hf
    config name becomes the config itself, a .py target an absolute path. Other families are returned as
    they are, once their params are what the family takes (core.family_params). Raises CustomModelError (one
    line)."""
    params = dict(workload.params)
    where = f"{workload.name}"
    if workload.family == "timm":
        if not isinstance(params.get("model"), str):
            raise CustomModelError(f"{where}: a timm entry needs params.model (a timm model name)")
        size = params.get("input_size")
        if size is not None and (
            not isinstance(size, list) or len(size) != 3 or not all(isinstance(v, int) and v > 0 for v in size)
        ):
            raise CustomModelError(f"{where}: params.input_size must be [C, H, W]")
    elif workload.family == "hf":
        config = params.get("config")
        if isinstance(config, str):
            params["config"], params["config_source"] = load_hf_config(config, params.pop("config_is_path", None))
        elif not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
            raise CustomModelError(f"{where}: an hf entry needs params.config: a name, a path, or a config mapping")
        params.setdefault("task", "causal-lm")
        if params["task"] not in HF_TASKS:
            raise CustomModelError(f"{where}: unknown task '{params['task']}' (known: {', '.join(HF_TASKS)})")
        seq_len = params.get("seq_len")
        if seq_len is not None and (not isinstance(seq_len, int) or seq_len < 2):
            raise CustomModelError(f"{where}: seq_len must be an integer >= 2")
    elif workload.family == "module":
        target = params.get("target")
        if not isinstance(target, str):
            raise CustomModelError(
                f"{where}: a module entry needs params.target ('FILE.py:function' or 'pkg.mod:function')"
            )
        params["target"] = check_target(target)
    else:
        problem = check_params(workload.family, params)
        if problem:
            raise CustomModelError(f"{where}: {problem}")
        return workload
    return replace(workload, params=params)


def select_models(registry: dict[str, Workload], text: str, options: CustomOptions = CustomOptions()) -> list[Workload]:
    """Comma-separated registry names, wildcards and custom names, each resolved once, in order.

    Registry entries of the custom families are prepared (prepare()); options meant for custom names
    are refused for registry names. Raises RegistryError / CustomModelError with a one-line message.
    """
    chosen: list[Workload] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if is_custom_name(item):
            found = [resolve(item, options)]
        else:
            found = match(registry, item, hint=REGISTRY_HINT)
            if options != CustomOptions():
                raise CustomModelError(
                    f"--input-size, --optimizer, --task and --seq-len shape models given by "
                    f"name (timm:, hf:, FILE.py:FUNC); '{item}' is defined in the registry"
                )
            found = [prepare(w) for w in found]
        chosen.extend(w for w in found if w.name not in {c.name for c in chosen})
    if not chosen:
        raise RegistryError("no model given")
    return chosen
