"""The ``memcairn`` console script.

``memcairn hook ...`` is dispatched before anything heavy is imported: a hook is a fresh process for every
agent event, so it must not pay for click, the store, the web framework or the embedding model.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["hook"]:
        from memcairn.hooks.runner import run_hook  # standard library only

        return run_hook(args[1:])
    from memcairn.cli import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
