"""Typed algorithm options: one dataclass per algorithm, read by both ends and by the App.

An algorithm declares its options once, as a frozen dataclass derived from
:class:`Options` whose fields are made with :func:`option`. The fields give

* the **run-config keys** of the Flower App (kebab-case: ``privacy_threshold`` ->
  ``privacy-threshold``, or an explicit ``key``) and their defaults, from which the App's
  default run config is generated (a test checks that ``pyproject.toml`` agrees);
* the **validation** (type, ``choices``, ``minimum``/``maximum``, an optional ``check``),
  with a ``ValueError`` that names the key;
* the **message config**: the strategy sends :meth:`Options.to_config` and the client
  reads :meth:`Options.from_config`, so no default is restated on either end.

A field with ``auto=v`` takes ``0`` as "the algorithm's default" and stores ``v`` instead
(several algorithms share a run-config key such as ``n-init`` whose sensible default
differs between them). This module is pure Python: no Flower, no NumPy.
"""

from __future__ import annotations

import dataclasses
import numbers
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, ClassVar, Self

__all__ = ["INT_CEILING", "Options", "option"]

_SCALARS = (bool, int, float, str)

#: The largest value of an integer option without its own ``maximum``: the options
#: travel in the server's messages, and no size a client allocates from them (``k``,
#: restarts, iterations, sample rows) may be unbounded.
INT_CEILING = 1_000_000


def option(
    default: Any,
    *,
    key: str | None = None,
    help: str = "",  # noqa: A002 - the natural name of a help text
    choices: tuple | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    auto: Any = None,
    check: Callable[[Any], str | None] | None = None,
    run_config: bool = True,
    when: Callable[[Mapping[str, Any]], bool] | None = None,
) -> Any:
    """Declare one option field.

    Parameters
    ----------
    default : bool, int, float or str
        The default (also the App's run-config default).
    key : str, optional
        Run-config and message key; defaults to the field name in kebab case.
    help : str
        One line for the documentation of the run config.
    choices : tuple, optional
        The allowed values.
    minimum, maximum : float, optional
        Inclusive bounds of a number (checked after ``auto`` is resolved).
    auto : optional
        If set, the value ``0`` means "the algorithm's default" and becomes ``auto``.
    check : callable, optional
        ``check(value) -> message or None``: a further test; a message is an error.
    run_config : bool, default True
        ``False``: a constructor/message option that is not a run-config key.
    when : callable, optional
        ``when(run_config) -> bool``: whether the key matters to a run of that (merged)
        run config, e.g. ``k-min`` only to ``k='auto'``; a run's report lists it only
        then (:meth:`Options.keys_of_run`). Default: always.

    Returns
    -------
    dataclasses.Field
        The field, with its metadata.
    """
    meta = dict(key=key, help=help, choices=choices, minimum=minimum, maximum=maximum,
                auto=auto, check=check, run_config=run_config, when=when)
    return dataclasses.field(default=default, metadata=meta)


def _kebab(name: str) -> str:
    return name.replace("_", "-")


@cache
def _types(cls: type) -> dict[str, tuple[type, bool]]:
    """Every field's scalar type, and whether it may be ``None`` (``str | None``)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        tp, nullable = hints[f.name], False
        args = typing.get_args(tp)
        if len(args) == 2 and type(None) in args:  # X | None: a constructor's "not given"
            tp, nullable = next(a for a in args if a is not type(None)), True
        if tp not in _SCALARS:
            raise TypeError(f"{cls.__name__}.{f.name}: options are bool, int, float or str "
                            f"(or one of them | None), got {hints[f.name]!r}")
        out[f.name] = (tp, nullable)
    return out


def _coerce(name: str, tp: type, value: Any, where: str) -> Any:
    """Return ``value`` as ``tp`` or raise a ``ValueError`` that names the option."""
    # numbers.Integral/Real: NumPy's scalars too (a seed or a count from an array)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if getattr(getattr(value, "dtype", None), "kind", "") == "b" and not getattr(
                value, "shape", ()):  # NumPy's bool scalar
            return bool(value)
        if isinstance(value, numbers.Integral) and value in (0, 1):  # ConfigRecord/TOML ints
            return bool(value)
    elif tp is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    kind = {int: "an integer", bool: "true or false", float: "a number", str: "a string"}[tp]
    raise ValueError(f"{name} must be {kind}, got {value!r}{where}")


@dataclasses.dataclass(frozen=True)
class Options:
    """Base of the options dataclasses (see the module docstring).

    Subclasses are frozen dataclasses whose fields are made with :func:`option`; they
    may override :meth:`validate` for checks that involve several fields.

    An integer field without its own ``maximum`` is at most :attr:`int_ceiling`
    (:data:`INT_CEILING`; ``None`` in a subclass: unbounded, e.g. for seeds).
    """

    int_ceiling: ClassVar[int | None] = INT_CEILING

    def __post_init__(self) -> None:
        """Coerce every field to its type, resolve ``auto`` and validate."""
        for f in dataclasses.fields(self):
            tp, nullable = _types(type(self))[f.name]
            meta, name = f.metadata, f.name
            where = (f" (run-config key {self.key_of(f)!r})"
                     if meta.get("run_config", True) else "")
            if getattr(self, name) is None:
                if nullable:  # "not given" (a run config cannot hold None)
                    continue
                if f.default == 0 and tp is int:
                    object.__setattr__(self, name, 0)  # None: "the default", as 0
            value = _coerce(name, tp, getattr(self, name), where)
            if meta.get("auto") is not None and value == 0 and tp is not bool:
                value = meta["auto"]
            if meta.get("choices") is not None and value not in meta["choices"]:
                raise ValueError(f"{name} must be one of {list(meta['choices'])}, got "
                                 f"{value!r}{where}")
            if meta.get("minimum") is not None and value < meta["minimum"]:
                raise ValueError(f"{name} must be at least {meta['minimum']}, got "
                                 f"{value!r}{where}")
            if meta.get("maximum") is not None and value > meta["maximum"]:
                raise ValueError(f"{name} must be at most {meta['maximum']}, got "
                                 f"{value!r}{where}")
            if (tp is int and meta.get("maximum") is None
                    and self.int_ceiling is not None and value > self.int_ceiling):
                raise ValueError(f"{name} must be at most {self.int_ceiling}, got {value!r}"
                                 f"{where}: no option needs more, and a larger value would "
                                 "make every client allocate without bound")
            if meta.get("check") is not None and (msg := meta["check"](value)):
                raise ValueError(f"{name} {msg}, got {value!r}{where}")
            object.__setattr__(self, name, value)
        self.validate()

    def validate(self) -> None:
        """Checks across fields (override; raise ``ValueError``)."""

    # ------------------------------------------------------------------ keys
    @staticmethod
    def key_of(f: dataclasses.Field) -> str:
        """The run-config / message key of a field."""
        return f.metadata.get("key") or _kebab(f.name)

    @classmethod
    def fields_by_key(cls, *, run_config_only: bool = False) -> dict[str, dataclasses.Field]:
        """Map every key to its field (optionally only the run-config keys)."""
        return {cls.key_of(f): f for f in dataclasses.fields(cls)
                if not run_config_only or f.metadata.get("run_config", True)}

    @classmethod
    def keys_of_run(cls, run_config: Mapping[str, Any]) -> list[str]:
        """The run-config keys of this class that matter to a run of ``run_config``.

        Every run-config key whose ``when`` (see :func:`option`) holds of the merged run
        config, or that has none.
        """
        return [key for key, f in cls.fields_by_key(run_config_only=True).items()
                if f.metadata.get("when") is None or f.metadata["when"](run_config)]

    @classmethod
    def run_config_defaults(cls) -> dict[str, Any]:
        """The run-config keys of this algorithm and their defaults (before ``auto``)."""
        return {key: f.default for key, f in cls.fields_by_key(run_config_only=True).items()}

    # ------------------------------------------------------------ conversion
    @classmethod
    def from_config(cls, config: Mapping[str, Any], *, run_config_only: bool = False,
                    **overrides: Any) -> Self:
        """Build the options from a kebab-keyed mapping (run config or message config).

        Keys of other algorithms are ignored; missing keys take their defaults.

        Parameters
        ----------
        config : mapping
            ``context.run_config``, a merged run config, or a message's ``config``.
        run_config_only : bool, default False
            Read only the run-config keys (a run config may hold another algorithm's key
            of the same name as one of this class's message-only options).
        **overrides
            Field values (by field name) that replace what ``config`` says.

        Returns
        -------
        Options
            The validated options.
        """
        kwargs = {f.name: config[key]
                  for key, f in cls.fields_by_key(run_config_only=run_config_only).items()
                  if key in config}
        kwargs.update(overrides)
        return cls(**kwargs)

    @classmethod
    def split_kwargs(cls, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Split keyword arguments into this class's fields and the rest."""
        names = {f.name for f in dataclasses.fields(cls)}
        return ({k: v for k, v in kwargs.items() if k in names},
                {k: v for k, v in kwargs.items() if k not in names})

    def to_config(self) -> dict[str, Any]:
        """The options as a kebab-keyed message config (values resolved)."""
        return {self.key_of(f): getattr(self, f.name) for f in dataclasses.fields(self)}

    def as_dict(self) -> dict[str, Any]:
        """The options by field name (for logs and ``result.json``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def describe_keys(cls) -> list[dict[str, Any]]:
        """One row per run-config key: key, default, choices and help (for docs)."""
        return [{"key": key, "default": f.default, "choices": f.metadata.get("choices"),
                 "auto": f.metadata.get("auto"), "help": f.metadata.get("help", "")}
                for key, f in cls.fields_by_key(run_config_only=True).items()]
