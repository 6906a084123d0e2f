"""Notes anchored to the files of a real git repository, for the tests of `memcairn stale` and project roots."""

from __future__ import annotations

from pathlib import Path

from memcairn.capture.anchors import AnchorReader
from memcairn.core.models import NewItem
from memcairn.store import Store

FILES = {"cart.py": "def cart_total(items):\n    return sum(items)\n",
         "tax.py": "def tax_rate(region):\n    return 0.2\n",
         "ship.py": "def ship_cost(weight):\n    return 5\n"}


def anchored(store: Store, repo: Path, path: str, text: str, project: str = "shop") -> int:
    """A note titled ``text`` about ``path`` of ``repo``, anchored as capture would anchor it; its id."""
    anchors = AnchorReader().anchors(str(repo), [path], [text])
    return store.add_item(NewItem(project=project, kind="manual", title=text, text=text, anchors=anchors)).id
