"""Configs in and out: YAML files → typed :class:`~arlarena_jax.train.config.Config`, dotted
command-line overrides, and the dump that loads back to an equal config.

- A YAML file is a nested mapping of the schema's sections. ``base: other.yaml`` (or a list)
  includes files relative to the including one: bases merge in order, then the file's own keys
  (mappings merge key by key, anything else is replaced).
- Values are checked against the field types before anything is built: ``int`` rejects ``bool``
  and ``float``; ``float`` accepts ``int``; strings are never turned into numbers; ``tuple``
  fields take YAML lists; ``Literal`` fields one of their values; ``X | None`` also ``null``.
  Scientific notation without a dot (``1e-6``) reads as a float, as in YAML 1.2.
- An override is ``key.path=value``; the value is parsed as YAML (``10``, ``1e-5``, ``true``,
  ``null`` or ``None``, ``[a, b]``, ``{temperature: 0.6}`` for a section) and checked like a file
  value, except that a string field takes the text as written (``model.tokenizer=0001``).
- Unknown keys, wrong types and broken cross-field rules (:func:`config.validate`) raise
  :class:`ConfigError` with one line naming the key path, with a ``difflib`` suggestion.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from arlarena_jax.errors import ConfigError, InvalidField
from arlarena_jax.train.config import Config
from arlarena_jax.train.config_checks import check, validate
from arlarena_jax.train.resolution import Resolved, resolve_run

INCLUDE_KEY = "base"


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads ``1e-6`` (no dot) as a float."""


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes strings the loader above would read as floats."""


_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
    |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


def _unique_keys(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    """A mapping whose keys are unique: a repeated key (a second ``trainer:`` section would
    silently replace the first) is an error naming both lines."""
    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if isinstance(key, typing.Hashable) and key in first:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first at line {first[key]})",
                key_node.start_mark,
            )
        if isinstance(key, typing.Hashable):
            first[key] = line
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_keys)
for _cls in (_Loader, _Dumper):
    _cls.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
_Dumper.add_representer(  # lists in flow style ([0.9, 0.999]), mappings in block style
    list, lambda dumper, v: dumper.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True)
)
_Dumper.add_representer(  # YAML 1.1 line breaks (NEL, LS, PS) survive only escaped
    str,
    lambda dumper, v: dumper.represent_scalar(
        "tag:yaml.org,2002:str", v, style='"' if any(c in v for c in "\x85\u2028\u2029") else None
    ),
)


def _error(key: str, message: str) -> ConfigError:
    return ConfigError(f"config key {key!r}: {message}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _describe(tp: Any) -> str:
    origin, args = get_origin(tp), get_args(tp)
    if tp is type(None):
        return "null"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {_describe(args[0])}"
        return f"a list of {len(args)} ({', '.join(_describe(a) for a in args)})"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return tp.__name__


def _got(value: Any) -> str:
    if value is None:
        return "null"
    text = repr(value)
    return f"{text[:60]}{'...' if len(text) > 60 else ''} ({type(value).__name__})"


def _unknown(key: str, known: Sequence[str]) -> ConfigError:
    """``unknown config key 'a.b' (did you mean 'a.c'?)`` for ``key`` among sibling keys."""
    prefix, _, name = key.rpartition(".")
    close = difflib.get_close_matches(name, list(known), n=1)
    if close:
        hint = f"did you mean {'.'.join(filter(None, (prefix, close[0])))!r}?"
    else:
        elsewhere = [k for k in config_keys() if k.rpartition(".")[2] == name]
        if elsewhere:
            hint = f"did you mean {elsewhere[0]!r}?"
        else:
            hint = f"known keys{f' of {prefix!r}' if prefix else ''}: {', '.join(known)}"
    return ConfigError(f"unknown config key {key!r} ({hint})")


def _convert(value: Any, tp: Any, key: str, default: Any = None) -> Any:
    """``value`` checked against ``tp`` (tuples from lists, floats from ints, nested sections;
    a section's missing keys keep ``default``'s values, the field's own default)."""
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise _error(key, f"expected a mapping of {tp.__name__} keys, got {_got(value)}")
        return _build(tp, value, key, default)
    origin, args = get_origin(tp), get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        for option in options:
            try:
                return _convert(value, option, key)
            except ConfigError as exc:  # a nested error (list item, section key) is the answer
                if len(options) == 1 and not str(exc).startswith(f"config key {key!r}:"):
                    raise
    elif origin is Literal:
        if any(type(value) is type(a) and value == a for a in args):
            return value
    elif origin is tuple:
        if isinstance(value, list | tuple):
            items = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
            if len(items) == len(value):
                pairs = enumerate(zip(value, items, strict=True))
                return tuple(_convert(v, t, f"{key}[{i}]") for i, (v, t) in pairs)
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp in (bool, str):
        if isinstance(value, tp):
            return value
    else:
        raise TypeError(f"unsupported schema type {tp!r} at {key!r}")
    raise _error(key, f"expected {_describe(tp)}, got {_got(value)}")


def _build(cls: type, data: Mapping[str, Any], prefix: str, base: Any = None) -> Any:
    """A ``cls`` from ``data``; keys ``data`` leaves out keep ``base``'s values (the section's
    default in its parent: ``sft.optim`` starts from the cloning recipe, not RL's optimizer)."""
    hints = _hints(cls)
    base = cls() if base is None else base
    kwargs = {}
    for name, value in data.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if name not in hints:
            raise _unknown(key, list(hints))
        kwargs[name] = _convert(value, hints[name], key, getattr(base, name))
    try:
        return dataclasses.replace(base, **kwargs)
    except InvalidField as exc:  # a settings type that checks itself when built
        raise _error(f"{prefix}.{exc.field}" if prefix else exc.field, exc.message) from None


def config_from_dict(data: Mapping[str, Any]) -> Config:
    """A validated :class:`Config` from nested plain data (missing keys take their defaults)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"config: expected a mapping of sections, got {_got(data)}")
    return validate(_build(Config, data, ""))


def config_to_dict(config: Any) -> Any:
    """Nested plain data (dicts, lists, scalars) that :func:`config_from_dict` reads back."""
    if dataclasses.is_dataclass(config):
        return {f.name: config_to_dict(getattr(config, f.name)) for f in dataclasses.fields(config)}
    if isinstance(config, tuple | list):
        return [config_to_dict(v) for v in config]
    return config


def config_keys(cls: type = Config, prefix: str = "") -> list[str]:
    """Every leaf key of the schema as a dotted path (``optim.lr``, ``sampler.eval.top_k``, ...)."""
    keys = []
    for name, tp in _hints(cls).items():
        key = f"{prefix}.{name}" if prefix else name
        keys += config_keys(tp, key) if dataclasses.is_dataclass(tp) else [key]
    return keys


def _field_type(key: str) -> Any:
    tp: Any = Config
    walked: list[str] = []
    for part in key.split("."):
        if not dataclasses.is_dataclass(tp):
            raise _error(key, f"{'.'.join(walked)!r} is not a section")
        walked.append(part)
        hints = _hints(tp)
        if part not in hints:
            raise _unknown(".".join(walked), list(hints))
        tp = hints[part]
    return tp


def _accepts_str(tp: Any) -> bool:
    if get_origin(tp) in (typing.Union, types.UnionType):
        return any(_accepts_str(a) for a in get_args(tp))
    return tp is str


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        both = isinstance(v, Mapping) and isinstance(out.get(k), Mapping)
        out[k] = _merge(out[k], v) if both else v
    return out


def _override(data: dict[str, Any], item: str) -> dict[str, Any]:
    """``data`` with one ``key.path=value`` override applied (value YAML-parsed, typed)."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"config override {item!r}: expected key=value, e.g. trainer.seed=1")
    tp = _field_type(key)
    try:
        value = yaml.load(raw, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise _error(key, f"cannot parse {raw!r} as YAML ({problem})") from None
    if raw.strip() in ("None", "none"):
        value = None
    elif isinstance(value, int | float) and _accepts_str(tp):
        value = raw.strip()  # a string field takes the text as written (bools included)
    merge = dataclasses.is_dataclass(tp) and isinstance(value, Mapping)
    return _set(data, key.split("."), value, merge=merge, prefix="")


def _set(
    data: Mapping[str, Any], parts: list[str], value: Any, *, merge: bool, prefix: str
) -> dict[str, Any]:
    """A copy of ``data`` with ``value`` at the dotted ``parts`` (merged into a mapping there)."""
    head, rest = parts[0], parts[1:]
    key = f"{prefix}.{head}" if prefix else head
    out = dict(data)
    current = out.get(head)
    if rest:
        if current is None:
            current = {}
        elif not isinstance(current, Mapping):
            raise _error(key, f"expected a mapping, got {_got(current)}")
        out[head] = _set(current, rest, value, merge=merge, prefix=key)
    else:
        out[head] = (
            _merge(dict(current), value) if merge and isinstance(current, Mapping) else value
        )
    return out


def apply_overrides(config: Config, overrides: Sequence[str]) -> Config:
    """``config`` with dotted overrides applied in order, type-checked and validated."""
    if isinstance(overrides, str):
        overrides = [overrides]
    data = config_to_dict(config)
    for item in overrides:
        data = _override(data, item)
    return config_from_dict(data)


def read_mapping(path: Path, what: str = "config file") -> dict[str, Any]:
    """The YAML mapping in ``path`` (duplicate keys refused), or one :class:`ConfigError` line
    naming the file and what is wrong with it (unreadable, not UTF-8, invalid YAML, empty)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{what} {str(path)!r}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} {str(path)!r}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
            f"offset {exc.start})"
        ) from None
    try:
        data = yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"{what} {str(path)!r}: invalid YAML{where}: {problem}") from None
    if data is None:
        raise ConfigError(f"{what} {str(path)!r}: empty (no sections, only comments)")
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {str(path)!r}: expected a mapping, got {_got(data)}")
    return data


def _read(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    path = path.resolve()
    if path in chain:
        raise ConfigError(f"config file {str(path)!r}: include cycle via {INCLUDE_KEY!r}")
    data = read_mapping(path)
    bases = data.pop(INCLUDE_KEY, [])
    bases = [bases] if isinstance(bases, str) else bases
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise _error(INCLUDE_KEY, f"expected a file name or a list of them, got {_got(bases)}")
    merged: dict[str, Any] = {}
    for base in bases:
        merged = _merge(merged, _read(path.parent / base, (*chain, path)))
    return _merge(merged, data)


def _loaded(path: str | Path, overrides: Sequence[str]) -> Config:
    """The config of a YAML file (with its ``base`` includes) and dotted overrides, typed but
    not yet checked across fields."""
    data = _read(Path(path), ())
    for item in [overrides] if isinstance(overrides, str) else overrides:
        data = _override(data, item)
    return _build(Config, data, "")


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """The validated config of a YAML file (with its ``base`` includes) and dotted overrides."""
    return validate(_loaded(path, overrides))


def load_run(path: str | Path, overrides: Sequence[str] = ()) -> Resolved:
    """:func:`load_config`, resolved once and checked on that resolution: what a command
    hands to every later stage (:mod:`arlarena_jax.train.resolution`)."""
    return check(resolve_run(_loaded(path, overrides)))


def override_text(key: str, value: Any) -> str:
    """``key=value`` as a dotted override that :func:`load_config` reads back to ``value`` (the
    value as one line of YAML flow style; None as ``null``)."""
    text = yaml.dump(value, Dumper=_Dumper, default_flow_style=True, width=10**6).strip()
    text = text.removesuffix("...").strip()
    return f"{key}={text}"


def dumps_config(config: Config) -> str:
    """The config as YAML text that :func:`load_config` reads back to an equal config."""
    return yaml.dump(
        config_to_dict(config),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
    )


def dump_config(config: Config, path: str | Path) -> Path:
    """Write :func:`dumps_config` to ``path`` (parents created); return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps_config(config))
    return path
