"""What the harness's two command lines share: their argument types, messages and progress lines, fitted to a
log's width, and loading the Module a command line names."""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from rich.console import Console

from popxl_addons.core import Module

# Progress lines in a log: at most one per this many seconds, each at most LOG_COLUMNS wide.
PROGRESS_SECONDS = 5.0
LOG_COLUMNS = 80


class UsageError(Exception):
    """Bad input, reported as one message naming what was wrong."""


def fit(text: str, width: int = LOG_COLUMNS) -> str:
    """`text` with each line longer than `width` wrapped, continuations indented two more spaces."""
    out = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        indent = line[: len(line) - len(line.lstrip())]
        # Long words (paths, ids) are broken rather than left to overflow: nothing is dropped either way.
        wrapped = textwrap.wrap(
            line.strip(), width, initial_indent=indent, subsequent_indent=indent + "  ", break_on_hyphens=False
        )
        out.extend(wrapped or [""])
    return "\n".join(out)


def help_formatter(base: type[argparse.HelpFormatter]) -> Callable[..., argparse.HelpFormatter]:
    """`base` formatting for at most LOG_COLUMNS columns, or the terminal's width where narrower."""

    def make(prog: str) -> argparse.HelpFormatter:
        # argparse reads COLUMNS or the terminal, and leaves 2 columns spare.
        return base(prog, width=min(shutil.get_terminal_size().columns, LOG_COLUMNS) - 2)

    return make


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose error message is wrapped to fit LOG_COLUMNS, like its usage."""

    def error(self, message: str) -> NoReturn:
        """Print the usage and the wrapped message on standard error; exit with 2."""
        self.print_usage(sys.stderr)
        self.exit(2, fit(f"{self.prog}: error: {message}") + "\n")


def positive_ints(flag: str) -> Callable[[str], tuple[int, ...]]:
    """The argument type of `flag`: comma-separated positive integers."""

    def parse(text: str) -> tuple[int, ...]:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"{flag} takes comma-separated positive integers, e.g. 4,8; got {text!r}")
        return tuple(int(p) for p in parts)

    parse.__name__ = flag
    return parse


def subset(flag: str, allowed: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """The argument type of `flag`: a comma-separated subset of `allowed`."""

    def parse(text: str) -> tuple[str, ...]:
        values = tuple(v.strip() for v in text.split(",") if v.strip())
        unknown = [v for v in values if v not in allowed]
        if not values or unknown:
            raise argparse.ArgumentTypeError(
                f"{flag} takes a comma-separated subset of {','.join(allowed)}; got {text!r}"
            )
        return values

    parse.__name__ = flag
    return parse


def constructor_kwargs(text: str) -> dict[str, Any]:
    """The argument type of --kwargs: a JSON object of constructor arguments."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--kwargs takes a JSON object, e.g. '{{\"out_features\": 4}}': {e}") from e
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"--kwargs takes a JSON object of constructor arguments, got {text!r}")
    return value


def load_target(target: str) -> Callable[..., Module]:
    """The Module class or factory named `module:attr`, imported from the working folder first."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise UsageError(f"TARGET must be MODULE:ATTR, e.g. mymodel:Block; got {target!r}")
    # As `python -m` does: the working folder comes first on the import path.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and module_name.startswith(e.name):
            raise UsageError(
                f"cannot find module {module_name!r}: not in the working folder {cwd} nor on the import path"
            ) from e
        raise UsageError(f"importing module {module_name!r} failed: {e}") from e
    except Exception as e:
        raise UsageError(f"importing module {module_name!r} failed: {type(e).__name__}: {e}") from e
    if not hasattr(module, attr):
        where = getattr(module, "__file__", module_name)
        raise UsageError(f"module {module_name!r} ({where}) has no attribute {attr!r}")
    obj = getattr(module, attr)
    if inspect.isclass(obj) and issubclass(obj, Module):
        return obj
    if callable(obj) and not inspect.isclass(obj):
        return obj  # type: ignore[no-any-return]
    raise UsageError(
        f"{target} is {type(obj).__name__} {obj!r}, not a popxl_addons Module class or a function returning one"
    )


def build_module(factory: Callable[..., Module], kwargs: dict[str, Any], target: str) -> Module:
    """`factory(**kwargs)`, which must be a Module; `target` names the factory in the error."""
    module = factory(**kwargs)
    if not isinstance(module, Module):
        raise TypeError(f"{target}(**{kwargs}) returned {type(module).__name__}, not a popxl_addons Module")
    return module


def progress_line(head: str, detail: str) -> str:
    """`head` and as much of `detail` as fits LOG_COLUMNS."""
    room = LOG_COLUMNS - len(head) - 2
    if room < 8:
        return head[:LOG_COLUMNS]
    return f"{head}; {detail if len(detail) <= room else detail[: room - 3] + '...'}"


def progress_console() -> Console:
    """Where progress goes: standard error, so that the report on standard output stays clean."""
    return Console(stderr=True, width=None if sys.stderr.isatty() else LOG_COLUMNS)
