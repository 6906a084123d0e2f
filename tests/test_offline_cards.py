"""File cards: a file written whole inside a longer episode keeps what it holds in an observation of its own."""

from __future__ import annotations

from typing import Any

from memcairn.capture.offline import OfflineExtractor
from memcairn.capture.offline.cards import CARD_FACTS, _purpose
from memcairn.capture.records import Observation, ToolCall, Turn

STORE = '''defmodule MyApp.Services.TokenStore do
  @moduledoc """
  Mints one-time tokens for review links; each is consumed on first use.
  """
  use GenServer

  @default_ttl_seconds 120

  def mint(project_id, ttl_seconds \\\\ @default_ttl_seconds) do
    token = Base.url_encode64(:crypto.strong_rand_bytes(24), padding: false)
    :ets.insert(@table, {token, project_id, expires_at(ttl_seconds)})
    token
  end

  def consume(token) do
    case :ets.take(@table, token) do
      [{^token, project_id, _}] -> {:ok, project_id}
      [] -> {:error, "invalid or expired token"}
    end
  end
end
'''

HOOK = '''#!/usr/bin/env bash
# Fetches the review context when a review session starts.
# Exits silently on any failure so that the agent never waits on it.
set -euo pipefail
PORT="${APP_PORT:-1100}"
curl -s "http://127.0.0.1:${PORT}/api/review/${TOKEN}" --max-time 10 || exit 0
'''


def write(path: str, content: str, cid: str, narration: str | None = None) -> ToolCall:
    return ToolCall(name="Write", input={"file_path": f"/repo/{path}", "content": content},
                    response={"type": "create", "filePath": f"/repo/{path}"}, tool_use_id=cid, narration=narration)


def bash(command: str, stdout: str, cid: str) -> ToolCall:
    return ToolCall(name="Bash", input={"command": command},
                    response={"stdout": stdout, "stderr": "", "interrupted": False}, tool_use_id=cid)


def observe(calls: list[ToolCall], **kw: Any) -> list[Observation]:
    turn = Turn(session_id="s1", platform_source="claude-code", project="repo", prompt="Add review links.",
                cwd="/repo", tools=tuple(calls), **kw)
    return OfflineExtractor().observe(turn, calls).observations


def work() -> list[ToolCall]:
    return [
        write("lib/my_app/services/token_store.ex", STORE, "t1",
              narration="First, the token store: an ETS-backed GenServer, since tokens must not outlive a restart."),
        write("scripts/review-start.sh", HOOK, "t2"),
        write("priv/static/app.css", ".review { color: red; }\n" * 40, "t3"),
        bash("mix test", "12 tests, 0 failures\n", "t4"),
        bash("git commit -m 'feat: review links'", "[main 1a2b3c4] feat: review links\n", "t5"),
    ]


def test_each_file_written_in_an_episode_gets_a_card_with_what_it_holds() -> None:
    episode, *cards = observe(work())
    assert episode.title.startswith("Committed: feat: review links")
    by_file = {card.files_modified: card for card in cards}
    assert set(by_file) == {("lib/my_app/services/token_store.ex",), ("scripts/review-start.sh",)}  # no CSS card
    store = by_file[("lib/my_app/services/token_store.ex",)]
    assert store.title == "token_store.ex: TokenStore, mint, consume"
    assert store.type == "feature" and store.steps == ("t1",) and store.subtitle == "Add review links."
    # the agent's reason, what the file defines, its own account of itself
    assert store.narrative.startswith("First, the token store: an ETS-backed GenServer, since tokens must not")
    assert "defining MyApp.Services.TokenStore, mint, consume" in store.narrative
    assert "consumed on first use" in store.narrative
    # settings and messages before other code; annotations and bare definition lines left out
    assert "@default_ttl_seconds 120" in store.facts
    assert any("invalid or expired token" in fact for fact in store.facts)
    assert not any(fact.startswith(("@moduledoc", "def consume(token)")) for fact in store.facts)
    assert sum(len(f) for f in store.facts) + len("consumed on first use") <= CARD_FACTS + 100
    hook = by_file[("scripts/review-start.sh",)]
    # named by what it says it is, as it defines nothing
    assert hook.title.startswith("review-start.sh: Fetches the review context when a review session starts.")
    assert "Exits silently on any failure" in hook.narrative
    assert 'PORT="${APP_PORT:-1100}"' in hook.facts


def test_no_card_where_the_episode_says_it_all() -> None:
    # a write that is the whole episode is its own record
    alone = observe([write("lib/my_app/services/token_store.ex", STORE, "t1")])
    assert len(alone) == 1
    # a two-line file: the episode's facts quote every telling line of it
    small = observe([write("hello.sh", '#!/bin/bash\necho "Hello world"\n', "t1"),
                     bash("chmod +x hello.sh && ./hello.sh", "Hello world\n", "t2")])
    assert [o.title for o in small] == ["Created hello.sh"]


def test_cards_are_the_same_on_every_replay() -> None:
    assert observe(work()) == observe(work())


def test_a_files_own_account_is_its_header_comment_or_first_doc_heredoc() -> None:
    assert _purpose(HOOK.splitlines())[0] == ("Fetches the review context when a review session starts. Exits "
                                              "silently on any failure so that the agent never waits on it.")
    purpose, rest = _purpose(STORE.splitlines())
    assert purpose == "Mints one-time tokens for review links; each is consumed on first use."
    assert "@default_ttl_seconds 120" in "\n".join(rest) and "Mints" not in "\n".join(rest)
    assert _purpose(['"""Parse the config file."""', "import os"]) == ("Parse the config file.", ["import os"])
    assert _purpose(["import os", "x = 1"]) == ("", ["import os", "x = 1"])
    assert _purpose(['"""', "Parse the config file.", '"""', "import os"])[0] == "Parse the config file."


def test_edits_that_add_definitions_get_a_card_of_what_they_added() -> None:
    old = "defmodule MyApp.Tmux do\n  def list_sessions, do: cmd([\"ls\"])\nend\n"
    new = ('defmodule MyApp.Tmux do\n  def list_sessions, do: cmd(["ls"])\n\n'
           '  def launch_review(project_id, token) do\n'
           '    name = "app-review-project-#{project_id}"\n'
           '    cmd(["new-session", "-d", "-s", name, "-e", "APP_REVIEW_TOKEN=#{token}"])\n'
           '    Logger.info("launched review session #{name} for project #{project_id}")\n'
           '    {:ok, %{session: name, attach: "tmux attach -t #{name}", port: System.get_env("APP_PORT", "1100")}}\n'
           '  end\nend\n')
    calls = [
        ToolCall(name="Edit", input={"file_path": "/repo/lib/my_app/tmux.ex", "old_string": old, "new_string": new},
                 response={"filePath": "/repo/lib/my_app/tmux.ex"}, tool_use_id="e1",
                 narration="The hook reads the token from its environment, so the session must be started with it."),
        ToolCall(name="Edit", input={"file_path": "/repo/lib/my_app/tmux.ex", "old_string": "x = 1",
                                     "new_string": "x = 2"}, response={}, tool_use_id="e2"),
        bash("mix test", "3 tests, 0 failures\n", "t1"),
    ]
    episode, card = observe(calls)
    assert card.title == "tmux.ex: added launch_review" and card.steps == ("e1", "e2")
    assert card.narrative == ("The hook reads the token from its environment, so the session must be started "
                              "with it. Edited lib/my_app/tmux.ex, adding launch_review.")
    assert 'name = "app-review-project-#{project_id}"' in card.facts
    assert not any("list_sessions" in fact for fact in card.facts)  # it was there before
    # an edit that adds no definition: the episode's facts tell it
    assert len(observe([calls[1], calls[2]])) == 1


def test_a_long_option_given_a_number_is_a_setting_of_a_continued_command() -> None:
    # a script whose budget fills with code lines still keeps the timeouts of its curl call, without the
    # continuation marks
    script = ('#!/usr/bin/env bash\n# Fetches the review context.\nset -euo pipefail\n'
              + "".join(f'cp "$src/part{n}.txt" "$dest/part{n}-copy.txt" && chmod 644 "$dest/part{n}-copy.txt"\n'
                      for n in range(8))
              + 'RESPONSE="$(curl -s \\\n  "http://127.0.0.1:${PORT}/api/review/${TOKEN}" \\\n'
              '  --connect-timeout 2 \\\n  --max-time 10 \\\n  2>/dev/null)" || exit 0\n')
    _episode, card = observe([write("scripts/review-start.sh", script, "t1"), bash("mix test", "1 test\n", "t2")])
    assert "--connect-timeout 2" in card.facts and "--max-time 10" in card.facts
    assert not any(fact.endswith("\\") for fact in card.facts)


def test_edits_that_add_tests_get_a_card_naming_them() -> None:
    old = 'defmodule MyApp.RendererTest do\n  test "renders text" do\n    assert true\n  end\nend\n'
    new = old.replace("end\nend\n", 'end\n\n  test "uses id when present, falls back to uuid" do\n'
                      '    assert render(%{id: "m1", uuid: "u1"}).message_id == "m1"\n  end\nend\n')
    edit = ToolCall(name="Edit", input={"file_path": "/repo/test/renderer_test.exs", "old_string": old,
                                        "new_string": new}, response={}, tool_use_id="e1")
    # within a longer episode, whose facts cannot quote every file's new lines
    *_rest, card = observe([*work()[:3], edit, *work()[3:]])
    assert card.title.startswith('renderer_test.exs: added test "uses id when present')
    assert card.narrative == ('Edited test/renderer_test.exs, adding test "uses id when present, falls back to '
                              'uuid".')
    assert "renders text" not in card.narrative  # a test the file had already
