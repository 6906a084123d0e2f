"""A session block of the SessionStart digest says how the work was checked: the commands that tested, linted,
type-checked or built it and passed, from the offline extractor's run facts, for any language and agent."""

from __future__ import annotations

from capture_queue import send

from memcairn.capture.pipeline import CapturePipeline
from memcairn.context.build import render_context
from memcairn.context.lines import how_to_check
from memcairn.core.models import MemoryItem, NewItem
from memcairn.store import Store
from memcairn.wire.config import Settings


def _item(store: Store, *facts: str) -> MemoryItem:
    made = store.add_item(NewItem(project="p", kind="observation", type="change", title=facts[0], facts=list(facts)))
    return store.get_items([made.id])[0]


def test_passing_checks_are_listed_once_newest_first_with_how_they_ended(store: Store) -> None:
    newest = _item(store, "ran `mise run test 2>&1 | tail -30` → go test: 14 ok",
                   "ran `cd web && bun run typecheck` → ok: $ tsc", "ran `cargo clippy` (3 runs) → failed → ok")
    older = _item(store, "ran `mise run test` → failed (exit 1)", "verified: `mise run lint` → ok",
                  "ran `test -f .workmux.yaml; printf 'config'` → ok", "ran `ls src` → ok",
                  "ran `pytest tests/test_a_very_long_name_cut…` → ok", "ran `npm run build` → 3 failed, 10 passed")
    assert how_to_check([newest, older]) == ("`mise run test` go test: 14 ok; `bun run typecheck` ok; "
                                             "`cargo clippy` ok; `mise run lint` ok")
    assert how_to_check([_item(store, "ran `ls` → ok")]) == ""


def test_the_digest_of_a_captured_session_says_how_it_was_checked(store: Store, settings: Settings) -> None:
    send(store, settings, "session_start")
    send(store, settings, "user_prompt", prompt="Make the cart total use Decimal")
    send(store, settings, "tool_use", tool_name="Edit", tool_use_id="t1",
         tool_input={"file_path": "/work/shop/cart.py", "old_string": "total = 0", "new_string": "total = Decimal(0)"},
         tool_response="ok")
    send(store, settings, "tool_use", tool_name="Bash", tool_use_id="t2", tool_input={"command": "go build ./..."},
         tool_response={"stdout": "cart.go:3:2: undefined: Decimal", "exit_code": 1}, is_error=True)
    send(store, settings, "tool_use", tool_name="Bash", tool_use_id="t3", tool_input={"command": "go test ./..."},
         tool_response={"stdout": "ok  \tshop/cart\t0.012s\nok  \tshop/api\t0.020s\n", "exit_code": 0})
    send(store, settings, "stop", last_assistant_message="The cart total uses Decimal; vet and tests pass.")
    CapturePipeline(store, settings).process_pending(flush=True)
    digest = render_context(store, settings, projects=["shop"])
    checks = next(line for line in digest.splitlines() if line.startswith("Checks: "))
    assert "`go test ./...`" in checks and "ok" in checks and "go build" not in checks, digest  # failed: not a way
