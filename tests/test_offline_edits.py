"""What an edit changed: definitions across languages, renames, DSL entries and the telling new lines."""

from __future__ import annotations

from memcairn.capture.offline.edits import change, definitions


def test_definitions_across_languages() -> None:
    text = "\n".join([
        "def fetch(url):", "class Cache:", "func (s *Server) Serve() error {", "type Point struct {",
        "export async function load() {", "export const total = (items) => 0", "pub(crate) fn parse() {}",
        "impl Display for Point {", "CREATE TABLE IF NOT EXISTS users (", "defmodule Spotter.Services.Tmux do",
        "  defp valid?(x) do", "interface Props {", "cleanup() {",
    ])
    assert definitions(text) == [
        "fetch", "Cache", "Serve", "Point", "load", "total", "parse", "Display", "users", "Spotter.Services.Tmux",
        "valid?", "Props", "cleanup",
    ]


def test_an_edit_names_added_removed_and_renamed_definitions() -> None:
    added = change("def a():\n    pass", "def a():\n    pass\n\ndef b():\n    return 1\n\nclass C:\n    pass")
    assert added.describe() == ["added b, C"]
    renamed = change("function oldName() {\n  return 1\n}", "function newName() {\n  return 1\n}")
    assert renamed.describe() == ["renamed oldName → newName"]
    removed = change("fn a() {}\nfn b() {}\nfn c() {}", "fn a() {}")
    assert removed.describe() == ["removed b, c"]


def test_a_body_change_names_its_definition() -> None:
    found = change("  def render(x) do\n    x\n  end", "  def render(x) do\n    x |> strip_ansi()\n  end")
    assert found.describe() == ["changed render"]
    assert found.gist == ["x |> strip_ansi()"]


def test_dsl_entries_routes_and_config_keys_count_as_added() -> None:
    elixir = change("    update :update do\n    end", "    update :update do\n    end\n\n    update :close do\n"
                    "      change set_attribute(:state, :closed)\n    end")
    assert elixir.describe() == ["added update :close"]
    routes = change('    live("/sessions/:id", SessionLive)',
                    '    live("/sessions/:id", SessionLive)\n    live("/projects/:project_id/review", ReviewLive)')
    assert routes.describe() == ["added live /projects/:project_id/review"]
    yaml = change("name: app\n", "name: app\ntimeout: 30\n")
    assert yaml.describe() == ["added timeout"]


def test_the_gist_quotes_telling_added_lines_not_closers_or_old_lines() -> None:
    old = "config :app, Repo,\n  pool_size: 10\n"
    new = old + "\nconfig :app, Endpoint,\n  server: false,\n  secret_key_base: String.duplicate(\"k\", 4)\nend\n}\n"
    found = change(old, new)
    assert found.gist == ["config :app, Endpoint,", "server: false,", 'secret_key_base: String.duplicate("k", 4)']
    assert all(len(line) <= 110 for line in change("", "x = '" + "a" * 500 + "'").gist)


def test_the_gist_stays_within_its_budget_and_prefers_definitions() -> None:
    body = "\n".join(f"    value_{i} = compute('{i}')" for i in range(40))
    found = change("", f"class Big:\n{body}\n    def run(self):\n        pass", budget=120)
    assert found.gist[0] == "class Big:" and "def run(self):" in found.gist
    assert sum(len(line) + 3 for line in found.gist) <= 120


def test_settings_are_quoted_before_other_lines() -> None:
    module = ("defmodule Tokens do\n" + "".join(f"  value_{i} = compute('x', 'y')\n" for i in range(5))
              + "  @default_ttl_seconds 120\nend")
    assert change("", module, budget=60).gist == ["defmodule Tokens do", "@default_ttl_seconds 120"]
    script = 'set -e\ncurl -s http://localhost/api | jq .\nPORT="${APP_PORT:-1100}"\n'
    assert change("", script, budget=40).gist == ['PORT="${APP_PORT:-1100}"']
