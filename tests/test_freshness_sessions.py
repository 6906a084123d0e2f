"""The SessionStart digest treats a session's summaries as it treats observations: a summary whose anchored file
is gone leaves its session block (a session left with none leaves the digest) and is named under "No longer
true"; a block whose newest summary's files changed says so on its heading."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from git_repo import committed_repo

from memcairn.capture.anchors import AnchorReader
from memcairn.context.build import render_context
from memcairn.context.freshness_check import FreshnessChecker
from memcairn.core.models import NewItem
from memcairn.store import Store
from memcairn.wire.config import Settings

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

FILES = {"cart.py": "def cart_total(items):\n    return sum(items)\n",
         "tax.py": "def tax_rate(region):\n    return 0.2\n"}


def summary(store: Store, repo: Path, session: str, path: str, request: str, learned: str, at: int) -> int:
    anchors = AnchorReader().anchors(str(repo), [path], [request, learned])
    return store.add_item(NewItem(project="shop", kind="summary", session=session, platform_source="claude-code",
                                  request=request, learned=learned, anchors=anchors, created_at_epoch=at)).id


def digest(store: Store, settings: Settings) -> str:
    return render_context(store, settings, projects=["shop"], freshness=FreshnessChecker())


def test_a_stale_summary_leaves_its_session_block_and_is_named_no_longer_true(
        store: Store, settings: Settings, tmp_path: Path) -> None:
    repo = committed_repo(tmp_path / "shop", FILES)
    base = 1_780_000_000_000
    gone = summary(store, repo, "s-cart", "cart.py", "Why are cart totals off", "`cart_total` sums the items",
                   base)
    kept = summary(store, repo, "s-tax", "tax.py", "What is the tax rate", "`tax_rate` returns a flat rate",
                   base + 60_000)
    before = digest(store, settings)
    assert f"Why are cart totals off (#{gone})" in before and "`cart_total` sums the items" in before

    (repo / "cart.py").unlink()
    (repo / "tax.py").write_text(FILES["tax.py"] + "\n\ndef tax_free(region):\n    return False\n")
    after = digest(store, settings)
    blocks, _, gone_list = after.partition("## No longer true")
    assert "Why are cart totals off" not in blocks and "`cart_total` sums the items" not in blocks
    assert f"What is the tax rate (#{kept}) [changed since]" in blocks and "`tax_rate` returns a flat rate" in blocks
    assert "## Recent sessions (1, newest first)" in blocks
    assert f"#{gone} " in gone_list and "[stale: cart.py deleted]" in gone_list
