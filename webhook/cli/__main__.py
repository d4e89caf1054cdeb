"""``python -m webhook.cli``: the same as ``kgov``."""

from webhook.cli import main

main()
