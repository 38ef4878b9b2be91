"""The params each built-in workload family takes (models.yaml), checked before anything is built. No torch.

A registry entry's `params` go to its family's builder as they are; a key the builder does not read (a typo,
`hiden: 3`) would be dropped without a word, a missing one would end a trial in `KeyError: 'features'`, and a
string where a number belongs (`image_size: "224"`) would be taken or fail far from the file. check_params says
which key is wrong and what it should be, in one line, before the first trial or trace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Param:
    """One key of a family's params: its kind ("int", "float", "bool", "str", "mapping"), whether an entry must give
    it, the smallest and largest values an int takes, and whether null stands for "not set"."""

    kind: str
    required: bool = False
    least: int = 1
    nullable: bool = False
    most: int | None = None


_INT, _FLOAT, _BOOL = Param("int"), Param("float"), Param("bool")
_REQUIRED_INT = Param("int", required=True)
MAX_LAYERS = 10_000  # the deepest published models have a few hundred layers; each takes time to build, even faked
_LAYERS = Param("int", required=True, most=MAX_LAYERS)

_BERT = {
    "layers": _LAYERS,
    "hidden": _REQUIRED_INT,
    "heads": _REQUIRED_INT,
    "ffn": _REQUIRED_INT,
    "vocab": _REQUIRED_INT,
    "seq_len": _REQUIRED_INT,
    "dropout": _FLOAT,
}

# What each family's builder (memprobe/workloads/) reads; FAMILY_PARAMS[f] is all of it.
FAMILY_PARAMS: dict[str, dict[str, Param]] = {
    "toy-mlp": {
        "features": _REQUIRED_INT,
        "hidden": _REQUIRED_INT,
        "classes": _REQUIRED_INT,
        "layers": Param("int", most=MAX_LAYERS),
    },
    "bert-pretraining": {**_BERT, "mlm_probability": _FLOAT},
    "bert-squad": {**_BERT, "question_len": _INT},
    "transformer-translation": {
        **{k: Param("int", most=MAX_LAYERS) for k in ("encoder_layers", "decoder_layers")},
        **{k: _INT for k in ("d_model", "ffn", "heads", "vocab")},
        **{k: _INT for k in ("src_len", "tgt_len")},
        **{k: _FLOAT for k in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing")},
        "pre_norm": _BOOL,
    },
    "timm-classifier": {
        "model": Param("str", required=True),
        "image_size": _REQUIRED_INT,
        "classes": _INT,
        "channels_last": _BOOL,
        "kwargs": Param("mapping"),
    },
    "pix2pixhd": {
        **{k: _INT for k in ("width", "height", "label_nc", "output_nc", "ngf", "ndf", "d_layers", "d_scales")},
        **{k: _INT for k in ("global_downsamplings", "vgg_width")},
        **{k: Param("int", least=0, most=MAX_LAYERS) for k in ("local_enhancers", "global_blocks", "local_blocks")},
        **{k: _FLOAT for k in ("lambda_feat", "lambda_vgg", "edge_density")},
        "instance_edges": _BOOL,
        "channels_last": _BOOL,
    },
    "llama-causal-lm": {
        "layers": _LAYERS,
        **{k: _REQUIRED_INT for k in ("hidden", "heads", "ffn", "vocab")},
        **{k: _INT for k in ("kv_heads", "seq_len", "batch")},
        **{k: _FLOAT for k in ("rms_norm_eps", "rope_theta", "lora_dropout")},
        "tied_embeddings": _BOOL,
        "checkpointing": _BOOL,
        "lora": Param("int", least=0, nullable=True),
        "lora_alpha": Param("float", nullable=True),
        "lora_base_dtype": Param("str"),
        "axis": Param("str"),
    },
}

_EXAMPLES = {"int": "an integer such as 64", "float": "a number such as 0.1", "bool": "true or false"}


def _problem(value: Any, spec: Param) -> str:
    """What is wrong with `value` for `spec`, or "" when nothing is."""
    if value is None:
        return "" if spec.nullable else f"is null; give {_EXAMPLES.get(spec.kind, 'a value')}"
    if spec.kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            quoted = " (quoted: write it without quotes)" if isinstance(value, str) else ""
            return f"must be an integer, got {value!r}{quoted}"
        if value < spec.least:
            return f"must be at least {spec.least}, got {value}"
        if spec.most is not None and value > spec.most:
            return f"must be at most {spec.most:,} (a layer count past that is a typo), got {value:,}"
    elif spec.kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            quoted = " (quoted: write it without quotes)" if isinstance(value, str) else ""
            return f"must be a number, got {value!r}{quoted}"
        if not math.isfinite(value) or value < 0:
            return f"must be a finite number >= 0, got {value!r}"
    elif spec.kind == "bool" and not isinstance(value, bool):
        return f"must be true or false, got {value!r}"
    elif spec.kind == "str" and not isinstance(value, str):
        return f"must be a string, got {value!r}"
    elif spec.kind == "mapping" and not isinstance(value, dict):
        return f"must be a mapping, got {value!r}"
    return ""


def check_params(family: str, params: dict[str, Any]) -> str:
    """The first thing wrong with a registry entry's `params` for `family` (a key the family does not take, one
    it needs and lacks, a value of the wrong type or range), as a phrase to follow the entry's name; "" when
    nothing is, or when memprobe has no table for the family (the custom families check their own)."""
    specs = FAMILY_PARAMS.get(family)
    if specs is None:
        return ""
    unknown = sorted(str(k) for k in params if k not in specs)
    if unknown:
        return (
            f"params {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not taken by family '{family}' "
            f"(it takes: {', '.join(specs)})"
        )
    missing = [k for k, spec in specs.items() if spec.required and k not in params]
    if missing:
        return f"family '{family}' needs params {', '.join(missing)} (missing)"
    for key, value in params.items():
        problem = _problem(value, specs[key])
        if problem:
            return f"params.{key} {problem}"
    return ""
