"""``kgov completion bash|zsh|fish``: the shell completion script, as click writes it.

``eval "$(kgov completion bash)"`` (in ``~/.bashrc``), ``eval "$(kgov completion zsh)"`` (in
``~/.zshrc``), or ``kgov completion fish > ~/.config/fish/completions/kgov.fish``.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

from webhook.cli.errors import fail

__all__ = ["completion_command"]


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def completion_command(ctx: click.Context, shell: str) -> None:
    """Print the completion script of SHELL for kgov.

    \b
    bash:  eval "$(kgov completion bash)"      (in ~/.bashrc)
    zsh:   eval "$(kgov completion zsh)"       (in ~/.zshrc)
    fish:  kgov completion fish > ~/.config/fish/completions/kgov.fish
    """
    root = ctx.find_root()
    completion = get_completion_class(shell)
    if completion is None:  # pragma: no cover - click ships all three
        fail(f"no completion for {shell}")
    click.echo(completion(root.command, {}, "kgov", "_KGOV_COMPLETE").source())
