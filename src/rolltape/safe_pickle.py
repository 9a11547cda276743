"""Pickles that come with a policy, read as data: VecNormalize statistics
(``vecnormalize.pkl``) and the pickled entries of an SB3 checkpoint's saved ``data``.

``pickle.load`` calls whatever callable a file names (``os.system`` in a ``__reduce__``), so
a downloaded statistics file or checkpoint could run anything. Here every global a pickle
names is checked against what such a file legitimately holds, from its module and name
alone, before that module is imported: numpy arrays, dtypes, scalars and generators,
``collections.deque``/``OrderedDict``, Gymnasium's spaces, SB3's ``VecNormalize`` and
``RunningMeanStd`` (what ``VecNormalize.save`` pickles: itself less its env), and, for a
checkpoint's ``policy_class`` and ``policy_kwargs``, policy classes of SB3 / sb3-contrib,
their feature extractors, torch's activation modules and optimizers. Anything else is
refused with one sentence; nothing is imported or called for it.

May import: errors and the standard library; numpy, gymnasium, SB3 and torch only through
the globals admitted (imported lazily, by the unpickler).
"""

from __future__ import annotations

import importlib
import io
import pickle
from typing import Any, Callable

from rolltape.errors import UsageError

# numpy's own reconstruction of arrays, dtypes, scalars and random generators, under both of
# its module names (numpy 2 moved numpy.core to numpy._core; pickles keep the old names).
_NUMPY = {(core, name) for core in ("numpy.core.multiarray", "numpy._core.multiarray")
          for name in ("_reconstruct", "scalar")} | {
    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"), ("numpy.random._pickle", "__generator_ctor"),
    ("numpy.random._pickle", "__bit_generator_ctor"),
    ("numpy.random._pickle", "__randomstate_ctor"),
    ("numpy.random.bit_generator", "SeedSequence"),
    ("numpy.random.bit_generator", "__pyx_unpickle_SeedSequence"),
    ("numpy.random._pcg64", "PCG64"), ("numpy.random._pcg64", "PCG64DXSM"),
    ("numpy.random._mt19937", "MT19937"), ("numpy.random._philox", "Philox"),
    ("numpy.random._sfc64", "SFC64"),
}
# Containers pickle protocol 2+ names by reference (a dict, list or tuple needs no global).
_CONTAINERS = {("collections", "deque"), ("collections", "OrderedDict"), ("builtins", "set"),
               ("builtins", "frozenset"), ("builtins", "complex"), ("builtins", "slice"),
               ("copyreg", "_reconstructor"), ("builtins", "object")}
DATA = frozenset(_NUMPY | _CONTAINERS)
VECNORMALIZE = frozenset({("stable_baselines3.common.vec_env.vec_normalize", "VecNormalize"),
                          ("stable_baselines3.common.running_mean_std", "RunningMeanStd")})

Check = Callable[[Any], bool]


def _is_space(obj: Any) -> bool:
    from gymnasium.spaces import Space

    return isinstance(obj, type) and issubclass(obj, Space)


def _is_policy(obj: Any) -> bool:
    from stable_baselines3.common.policies import BasePolicy

    return isinstance(obj, type) and issubclass(obj, BasePolicy)


def _is_policy_part(obj: Any) -> bool:
    """A class ``policy_kwargs`` may name: a feature extractor, activation or optimizer."""
    import torch

    return isinstance(obj, type) and issubclass(obj, (torch.nn.Module, torch.optim.Optimizer))


_SB3 = ("stable_baselines3.", "sb3_contrib.")
# module prefix -> what an object found there must be (checked once it is found)
SPACES: tuple[tuple[tuple[str, ...], Check], ...] = ((("gymnasium.spaces.",), _is_space),)
POLICY_CLASS = SPACES + ((_SB3, _is_policy),)
POLICY_KWARGS = SPACES + ((_SB3 + ("torch.nn.modules.", "torch.optim."), _is_policy_part),)


class _Refused(Exception):
    """A global outside what the file may hold (its module and name)."""


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, names: frozenset[tuple[str, str]],
                 kinds: tuple[tuple[tuple[str, ...], Check], ...]) -> None:
        super().__init__(io.BytesIO(data))
        self.names, self.kinds = names, kinds

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.names or (module, name) in DATA:
            return super().find_class(module, name)
        for prefixes, check in self.kinds:
            # Only a module of the packages named is imported, and only a dotted name of
            # identifiers (a pickle's module string is the file author's).
            if module.startswith(prefixes) and all(p.isidentifier() for p in module.split(".")) \
                    and name.isidentifier():
                try:
                    found = getattr(importlib.import_module(module), name, None)
                except ImportError:
                    break
                if check(found):
                    return found
        raise _Refused(f"{module}.{name}"[:120])

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("a persistent id")


def loads(data: bytes, what: str, names: frozenset[tuple[str, str]] = frozenset(),
          kinds: tuple[tuple[tuple[str, ...], Check], ...] = SPACES) -> Any:
    """Unpickle ``data`` admitting only :data:`DATA`, ``names`` and the classes ``kinds``
    allows; ``what`` begins the one sentence a refusal or a corrupt file gets."""
    try:
        return _Unpickler(data, names, kinds).load()
    except _Refused as exc:
        raise UsageError(f"{what} names '{exc}', which such a file does not hold; rolltape "
                         "reads it as data and never imports or calls what a file names "
                         "(re-save it with the library that wrote it).") from None
    except RecursionError:
        raise UsageError(f"{what} is nested too deeply to be data.") from None
    except Exception as exc:  # a truncated or malformed pickle raises many types
        raise UsageError(f"{what} is corrupt or not a pickle ({type(exc).__name__}); re-save "
                         "it with the library that wrote it.") from None
