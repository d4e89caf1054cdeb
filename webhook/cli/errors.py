"""The one grammar of ``kgov``'s diagnostics and exit codes.

Every error is one line on stderr, ``kgov <command>: <message>``, with any details indented below
it; never a traceback. Exit codes:

==== ===========================================================================================
code meaning
==== ===========================================================================================
0    success
1    the answer is "no": a denied manifest, drift from the files or the cluster, problems found
2    bad usage, or an input (file, flag, cluster) that cannot be used
==== ===========================================================================================

A command says "no" with :class:`Refused` and "cannot use this" with :class:`CommandError` (or
click's own usage errors); :class:`KgovGroup` turns either into the line above. The command named
is the one the arguments select (``kgov chart values``), found by :func:`command_path`.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

import click

__all__ = [
    "EXIT_INPUT",
    "EXIT_NO",
    "EXIT_OK",
    "CommandError",
    "KgovGroup",
    "Refused",
    "command_path",
    "fail",
    "say",
    "warn",
]

EXIT_OK = 0
EXIT_NO = 1
EXIT_INPUT = 2


class CommandError(click.ClickException):
    """An input that cannot be used (exit 2): ``message`` is the error line, ``details`` go below it."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, details: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.details = list(details)
        #: The command that raised it (``kgov chart values``), read while it runs.
        self.where = _current_path()

    def show(self, file: Any = None) -> None:
        """Print the error in the grammar (click calls this when a command runs on its own)."""
        _say(self.where, self.format_message(), self.details)


class Refused(CommandError):
    """The answer is "no" (exit 1): denied, drift, problems found."""

    exit_code = EXIT_NO


def fail(message: str, code: int = EXIT_INPUT, details: Iterable[str] = ()) -> NoReturn:
    """Stop the command with ``message`` and exit ``code`` (2: unusable input; 1: the answer is no).

    Raises:
        CommandError: always (:class:`Refused` when ``code`` is 1).
    """
    raise (Refused if code == EXIT_NO else CommandError)(message, details)


def warn(message: str) -> None:
    """A warning on stderr, in the grammar: ``kgov <command>: warning: <message>``."""
    say(f"warning: {message}")


def _current_path() -> str:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return "kgov"
    names = []
    while ctx is not None:
        if ctx.parent is not None or not isinstance(ctx.command, KgovGroup):
            names.append(ctx.info_name or ctx.command.name or "")
        ctx = ctx.parent
    return " ".join(["kgov", *reversed(names)])


def command_path(group: click.Group, args: Sequence[str]) -> str:
    """``kgov`` and the names of the (sub)commands that ``args`` select: ``kgov chart values``.

    Options before a command name are skipped; the first argument that names no command ends it.
    """
    words = ["kgov"]
    command: click.Command = group
    for arg in args:
        if arg.startswith("-"):
            continue
        if not isinstance(command, click.Group):
            break
        sub = command.commands.get(arg)
        if sub is None:
            break
        words.append(arg)
        command = sub
    return " ".join(words)


def _say(where: str, message: str, details: Iterable[str] = ()) -> None:
    first, _, rest = message.strip().partition("\n")
    click.echo(f"{where}: {first}", err=True)
    for line in [*textwrap.dedent(rest).splitlines(), *details]:
        click.echo(f"  {line}" if line.strip() else "", err=True)


def say(message: str, details: Iterable[str] = ()) -> None:
    """A diagnostic that does not end the command (a document denied, a note), in the grammar:
    ``kgov <command>: <message>``, details indented below."""
    _say(_current_path(), message, details)


class KgovGroup(click.Group):
    """The ``kgov`` group: runs a command and turns what it raises into the grammar above."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode:
            return super().main(argv, "kgov", complete_var, standalone_mode, **extra)
        where = command_path(self, argv)
        try:
            result = super().main(argv, "kgov", complete_var, False, **extra)
        except click.UsageError as exc:
            at = exc.ctx.command_path if exc.ctx is not None else where  # the command click was parsing
            _say(at, exc.format_message(), [f"see '{at} --help'"])
            sys.exit(EXIT_INPUT)
        except CommandError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            _say(where, exc.format_message())
            sys.exit(EXIT_INPUT)
        except click.Abort:
            _say(where, "aborted")
            sys.exit(130)
        except Exception as exc:  # never a traceback: name the failure in one line
            _say(where, f"internal error: {type(exc).__name__}: {exc}", ["please report it with the command line"])
            sys.exit(EXIT_INPUT)
        sys.exit(result if isinstance(result, int) else EXIT_OK)
