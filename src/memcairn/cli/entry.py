"""The ``memcairn`` console script.

``memcairn hook ...`` is dispatched before anything heavy is imported: a hook is a fresh process for every
agent event, so it must not pay for click, the store, the web framework or the embedding model. ``memcairn mcp``
is dispatched early too: the agent waits for its first answer, so nothing but the server itself is imported (any
argument the short path does not know, ``--help`` included, goes to the click command, which explains it).
"""

from __future__ import annotations

import sys

HELP = {"--help", "-h"}  # ``memcairn hook --help`` is for a person: click prints the command's help


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["hook"] and not HELP.intersection(args[1:]):
        from memcairn.hooks.runner import run_hook  # standard library only

        return run_hook(args[1:])
    if args[:1] == ["mcp"]:
        platform = _mcp_platform(args[1:])
        if platform is not False:
            from memcairn.mcp.server import main as serve_mcp

            return serve_mcp(platform)
    from memcairn.cli.app import run

    return run(args)


def mcp() -> None:
    """The installed MCP server command, ``<python> -I -c "from memcairn.cli.entry import mcp; mcp()" [args]`` (see
    ``install.specs.mcp_command``): ``memcairn mcp [args]`` without the console script's start-up."""
    sys.exit(main(["mcp", *sys.argv[1:]]))


MCP_PLATFORMS = ("claude-code", "codex", "gemini-cli")  # as ``memcairn mcp --platform`` (click) lists them


def _mcp_platform(args: list[str]) -> str | None | bool:
    """The ``--platform`` of ``memcairn mcp`` arguments (None when absent), or False when they need click."""
    if not args:
        return None
    if len(args) == 2 and args[0] == "--platform" and args[1] in MCP_PLATFORMS:
        return args[1]
    if len(args) == 1 and args[0].startswith("--platform=") and args[0].split("=", 1)[1] in MCP_PLATFORMS:
        return args[0].split("=", 1)[1]
    return False


if __name__ == "__main__":
    sys.exit(main())
