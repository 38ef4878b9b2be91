"""Carry what a forked trace added to fake tensors' dispatch cache back to the process that forks the next traces.

FakeTensorMode answers an op it has seen before (the same op on tensors of the same shapes, dtypes and
strides: fast_fake's key) from a dispatch cache kept per process, and works out a new one through torch's
meta kernels, several times slower. Traces run in children forked from a process that never traces
(parallel.py), so each child started with the cache as the build left it and worked out again what the
traces before it had: in a NASNet trace, about half its time. Much of it does not depend on the batch (the
optimizer's step, the weight gradients), and at one precision much of the rest repeats. So a child sends
the entries its trace added along with its answer, and the parent adds them to its cache: a child forked
after that starts with them.

An entry is torch's own, made by torch on a miss and looked up by a key that holds everything its output
depends on (fast_fake.py), so a hit gives what a miss would: what is traced does not change
(tests/test_dispatch_cache.py compares the events). Only fast_fake's keys travel (plain values, dtypes,
sizes, and ops, sent by name); an entry that does not pickle, or whose op is not found here, stays behind.
"""

from __future__ import annotations

import functools
import pickle
from dataclasses import dataclass
from typing import Any

import torch

from memprobe.predict.fast_fake import FAST_KEY_TAG
from memprobe.predict.torch_internals import internal

FakeTensorMode = internal("torch._subclasses.fake_tensor.FakeTensorMode")
_DispatchCacheKey = internal("torch._subclasses.fake_tensor._DispatchCacheKey")
OpOverload = internal("torch._ops.OpOverload")


@dataclass(frozen=True)
class _Op:
    """An op in a key on its way between processes: its name ("aten.mm.default")."""

    name: str


def mark() -> int:
    """Where the cache stands now; added_since(mark()) later gives what was added after."""
    return len(FakeTensorMode.cache)


def added_since(start: int) -> bytes:
    """The entries added to the cache after `start` (a mark()) under fast_fake's keys, pickled for merge()."""
    items = list(FakeTensorMode.cache.items())[start:]
    entries = [
        (_portable(key.key), entry)
        for key, entry in items
        if key.key[:1] == (FAST_KEY_TAG,) and isinstance(key.key[1], OpOverload)
    ]
    try:
        return pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - an entry that does not pickle stays behind; the others go
        return pickle.dumps([e for e in entries if _pickles(e)], protocol=pickle.HIGHEST_PROTOCOL)


def merge(data: bytes) -> int:
    """Add what added_since() gave (in another process) to this process's cache; the number of entries added.
    Never raises: a cache is only a shortcut."""
    try:
        entries = pickle.loads(data)
    except Exception:  # noqa: BLE001 - see the docstring
        return 0
    added = 0
    for key, entry in entries:
        try:
            resolved = _resolved(key)
        except Exception:  # noqa: BLE001 - an op this process does not have
            continue
        FakeTensorMode.cache.setdefault(_DispatchCacheKey(resolved), entry)
        added += 1
    return added


def _pickles(entry: tuple) -> bool:
    try:
        pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - see added_since
        return False
    return True


def _portable(key: tuple) -> tuple:
    """fast_fake's key with its op (the key's second item; no other item is an op: see FastFakeTensorMode._describe)
    by name."""
    return (key[0], _Op(str(key[1])), *key[2:])


def _resolved(key: tuple) -> tuple:
    """_portable's inverse, with the op found here. Raises AttributeError or ValueError for an op not here."""
    return (key[0], op_named(key[1].name), *key[2:])


@functools.cache
def op_named(name: str) -> Any:
    """The OpOverload named `name` ("aten.mm.default", as str() of it gives). Raises AttributeError or ValueError
    when there is none."""
    namespace, packet, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, namespace), packet), overload)
