"""Checks shared by the ``kgov`` commands: Kubernetes names typed by a user, and output files.

A name that goes into an API path (``/namespaces/{namespace}/jobs/{name}``) must be a name the
API server could hold, or ``job/x/../finetune``, ``job/finetune?x=1`` or ``-n 'x/../ns'`` would
ask about another object. :data:`OBJECT_NAME` (a DNS-1123 subdomain, most objects' names) and
:data:`NAMESPACE` (a DNS-1123 label) refuse anything else as click usage errors (exit 2).

An output file must have an existing parent directory; :func:`check_output_file` says so before
any work is done, :func:`write_output` turns a failed write into a usage error naming the option.

:func:`file_option` declares an option that names a file (not a directory), the shape of most
``kgov`` inputs (``--platform``, ``--nodes``, ``--kubeconfig``, ``-o``…).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from webhook.core.platform.fields import dns1123_label_error, dns1123_subdomain_error

__all__ = ["NAMESPACE", "OBJECT_NAME", "OutputError", "check_output_file", "file_option", "write_output"]

_F = TypeVar("_F", bound=Callable[..., Any])


class _NameType(click.ParamType[str]):
    """A Kubernetes name: ``error(value)`` says why it is not one (None when it is)."""

    def __init__(self, name: str, error: Any) -> None:
        self.name = name
        self._error = error

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        problem = self._error(text)
        if problem:
            self.fail(problem, param, ctx)
        return text


#: An object name (DNS-1123 subdomain): Jobs, Workloads, ClusterQueues, Topologies, webhook configurations.
OBJECT_NAME = _NameType("name", dns1123_subdomain_error)
#: A namespace name (DNS-1123 label).
NAMESPACE = _NameType("namespace", dns1123_label_error)


class OutputError(click.ClickException):
    """An output that cannot be written (exit code 2, a usage error)."""

    exit_code = 2


def check_output_file(path: Path, option: str) -> None:
    """Refuse, before any work, an output file whose directory does not exist or that is a directory.

    Raises:
        OutputError: ``{option} {path}: no directory {parent}`` and the like.
    """
    parent = path.parent
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a directory")
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise OutputError(f"{option} {path}: directory {parent} {what}")


def write_output(path: Path, content: str | bytes, option: str) -> None:
    """Write ``content`` to ``path`` (text as UTF-8).

    Raises:
        OutputError: the directory is missing or the write failed (permission, read-only, full disk…).
    """
    check_output_file(path, option)
    try:
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot write: {exc.strerror or exc}") from None


def file_option(
    *param_decls: str, exists: bool = False, path_type: type[Any] | None = Path, **attrs: Any
) -> Callable[[_F], _F]:
    """``click.option(*param_decls, **attrs)`` whose value is a file path, refused by click when it
    names a directory (or, with ``exists``, names nothing). The value is a :class:`~pathlib.Path`,
    or the text as typed with ``path_type=None``."""
    return click.option(*param_decls, type=click.Path(exists=exists, dir_okay=False, path_type=path_type), **attrs)
