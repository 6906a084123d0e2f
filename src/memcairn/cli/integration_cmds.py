"""``memcairn mcp``, ``memcairn install <agent>`` and ``memcairn uninstall <agent>``: connecting agents."""

from __future__ import annotations

import click

from memcairn.cli.entry import MCP_PLATFORMS
from memcairn.wire.protocol import PLATFORM_ALIASES, PLATFORMS, platform_key

AGENT_CHOICES = ("claude-code", "codex", "gemini")


class AgentName(click.Choice):
    """An agent as ``install`` names it, also given as any spelling of its platform (``gemini-cli``, as
    ``--platform`` has it; ``Claude``...)."""

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 - click's signature
        key = platform_key(str(value))
        platform = PLATFORM_ALIASES.get(key) or next((p for p in PLATFORMS if platform_key(p) == key), None)
        if platform is not None:
            value = next(a for a in AGENT_CHOICES if platform.startswith(a))
        return super().convert(value, param, ctx)
RESTART = {
    "claude-code": "Restart Claude Code (or start a new session) to load the hooks and the MCP server.",
    "codex": "Restart Codex to load the MCP server and the hooks.",
    "gemini": "Restart Gemini CLI to load the MCP server and the hooks.",
}


@click.command("mcp")
@click.option("--platform", type=click.Choice(MCP_PLATFORMS),
              help="The agent running the server; with codex, the SessionStart context is also sent in the "
                   "server's instructions at start-up (Codex runs hooks only once trusted).")
def mcp(platform: str | None) -> int:
    """Serve the memory tools over MCP on stdin/stdout (what agents' MCP settings run).

    Tools: important_workflow, search, timeline, get_observations, session_start_context, save_memory,
    forget. Every tool asks the worker (started on the first call if none runs). Without a project, tools
    use the project of CLAUDE_PROJECT_DIR or the working directory. Exits when stdin closes.

    Example:

    \b
        memcairn mcp --platform codex
    """
    from memcairn.mcp.server import main

    return main(platform)


COMPRESS_CHOICES = ("offline", "anthropic", "claude-cli", "openai")


def _echo_report(report, verb_done: str) -> None:  # noqa: ANN001 - memcairn.install.Report, imported lazily
    if report.dry_run:
        diff = report.diff()
        click.echo(diff if diff else f"nothing to {report.action}: the files are already as they should be",
                   nl=not diff)
        click.echo("dry run: nothing was written", err=True)
        return
    if not report.changed:
        click.echo(f"nothing to {report.action}: the files are already as they should be")
        return
    for change in report.changes:
        if not change.changed:
            click.echo(f"unchanged {change.path}")
            continue
        verb = "removed" if change.after is None else "created" if change.before is None else verb_done
        saved = f" (backup: {change.backup})" if change.backup else ""
        click.echo(f"{verb} {change.path}{saved}")
    for found in report.removed_backups:
        click.echo(f"removed backup {found}")


@click.command("install")
@click.argument("agent", type=AgentName(AGENT_CHOICES))
@click.option("--dry-run", is_flag=True, help="Print the changes as a unified diff and write nothing.")
@click.option("--executable", metavar="PATH",
              help="The memcairn command the agent should run (default: this one, as an absolute path).")
@click.option("--compress", type=click.Choice(COMPRESS_CHOICES), metavar="BACKEND",
              help="Also set capture_backend: the model that writes the memories (offline, anthropic, claude-cli, "
                   "openai); the token caps that bound it are shown.")
def install(agent: str, dry_run: bool, executable: str | None, compress: str | None) -> None:
    """Register memcairn's hooks and MCP server with an agent, keeping the user's other settings.

    claude-code: hooks in ~/.claude/settings.json, the MCP server in ~/.claude.json (user scope; both under
    CLAUDE_CONFIG_DIR when set). codex: [mcp_servers.memcairn] in ~/.codex/config.toml and hooks in
    ~/.codex/hooks.json (CODEX_HOME). gemini: ~/.gemini/settings.json. Each file is backed up before it is
    written (<file>.memcairn-bak-<time>); running it twice changes nothing.

    With --compress claude-cli the memories are written by the claude command already logged in on this
    machine (its small model, headless), within the token caps llm_session_token_cap and llm_daily_token_cap;
    past a cap, and whenever the model fails, the offline extractor writes them.

    Example:

    \b
        memcairn install claude-code --dry-run
        memcairn install claude-code --compress claude-cli
    """
    import os
    import shlex

    from memcairn.install import AGENTS, memcairn_executable
    from memcairn.install import install as run_install
    from memcairn.install.specs import hook_command, hook_interpreter, mcp_command, resolve_executable

    exe = resolve_executable(executable) if executable else memcairn_executable()
    report = run_install(agent, exe, dry_run=dry_run)
    _echo_report(report, "updated")
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        click.echo(f"warning: {exe} is not an executable file (yet); the hooks fail until it is", err=True)
    if not dry_run:
        spec = AGENTS[agent]
        events = ", ".join(h.event for h in spec.hooks)
        interpreter = hook_interpreter(exe)
        command, args = mcp_command(exe, spec, interpreter)
        click.echo(f"hooks: {events} -> {hook_command(exe, spec, '<event>', interpreter)}")
        click.echo(f"MCP server memcairn: {' '.join(shlex.quote(a) for a in [command, *args])}")
        for note in report.notes:
            click.echo(note)
        for name in ("MEMCAIRN_HOME", "MEMCAIRN_PORT"):
            if os.environ.get(name):
                click.echo(f"note: {name} is set here, but the hooks and the MCP server read the agent's own "
                           f"environment: set {name} where {agent} starts (your shell profile), or they use the "
                           "default", err=True)
        if report.changed:
            click.echo(RESTART[agent])
    if compress is not None:
        _set_compression(compress, dry_run)


def _set_compression(backend: str, dry_run: bool) -> None:
    """Set ``capture_backend`` in settings.json and say what it costs: the model, the caps, what applies it."""
    import os
    import shutil

    from memcairn.capture.llm.api_clients import ANTHROPIC_DEFAULT_MODEL, OPENAI_DEFAULT_MODEL
    from memcairn.capture.llm.claude_cli import CLAUDE_CLI_DEFAULT_MODEL
    from memcairn.cli.settings_cmd import settings_file, write_settings_file
    from memcairn.wire.config import load_settings

    path, data = settings_file()
    if dry_run:
        click.echo(f"dry run: capture_backend would be set to {backend!r} in {path}", err=True)
    elif data.get("capture_backend") != backend:
        write_settings_file(path, {**data, "capture_backend": backend})
    cfg = load_settings()
    if cfg.capture_backend != backend and not dry_run:
        click.echo(f"note: MEMCAIRN_CAPTURE_BACKEND={os.environ.get('MEMCAIRN_CAPTURE_BACKEND')} is set in this "
                   "environment and wins over settings.json", err=True)
    if backend == "offline":
        click.echo(f"capture: the offline extractor writes the memories, no model (capture_backend in {path})")
        return
    model = cfg.llm_model.strip() or {"anthropic": ANTHROPIC_DEFAULT_MODEL, "openai": OPENAI_DEFAULT_MODEL,
                                      "claude-cli": CLAUDE_CLI_DEFAULT_MODEL}[backend]
    click.echo(f"capture: the {backend} backend ({model}) writes the memories (capture_backend in {path})")
    session_cap, daily_cap = cfg.llm_session_token_cap, cfg.llm_daily_token_cap
    click.echo(f"token caps: {_cap(session_cap)} a session (llm_session_token_cap), {_cap(daily_cap)} a day "
               "(llm_daily_token_cap); past a cap, or when the model fails, the offline extractor writes them")
    if backend == "claude-cli" and shutil.which(cfg.claude_cli.strip() or "claude") is None:
        click.echo(f"warning: {cfg.claude_cli or 'claude'} is not on PATH; until it is, the offline extractor "
                   "writes the memories (set claude_cli to its path)", err=True)
    if backend == "openai" and not cfg.llm_base_url.strip():
        click.echo("warning: the openai backend needs llm_base_url (memcairn settings set llm_base_url URL)",
                   err=True)
    if backend == "anthropic" and not os.environ.get(cfg.llm_api_key_env.strip() or "ANTHROPIC_API_KEY"):
        click.echo(f"note: the worker reads the key from {cfg.llm_api_key_env or 'ANTHROPIC_API_KEY'} in its "
                   "environment", err=True)
    click.echo("a running worker uses it once restarted: memcairn worker restart")


def _cap(tokens: int) -> str:
    return f"{tokens:,} tokens" if tokens > 0 else "no cap"


@click.command("uninstall")
@click.argument("agent", type=AgentName(AGENT_CHOICES))
@click.option("--dry-run", is_flag=True, help="Print the changes as a unified diff and write nothing.")
def uninstall(agent: str, dry_run: bool) -> None:
    """Remove exactly the hooks and MCP server that `memcairn install` added for an agent.

    The user's own entries stay; when nothing else changed since the install, each file gets back the
    very bytes it had before (a file the install created is removed). Memories are not touched.

    Example:

    \b
        memcairn uninstall claude-code
    """
    from memcairn.install import uninstall as run_uninstall

    _echo_report(run_uninstall(agent, dry_run=dry_run), "updated")
