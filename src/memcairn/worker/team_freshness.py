"""How true a team server's memories are, judged on this machine (the server has no working directory).

A team memory's anchors name the directory it was captured in, often a teammate's (``/home/ana/ledger``). Its files
are read where this machine keeps the project: the root ``memcairn projects root`` recorded, else the directory
this machine's own memories of the project were captured in (the newest that is still here), else the recorded
one (``unknown`` when that is not here either). A corrected memory has its correction's state.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from memcairn.context.freshness_check import RootedCheck, shared_checker
from memcairn.core.models import ItemFilter, MemoryItem
from memcairn.search.freshness import Freshness, with_corrections

SCANNED = 50  # newest local memories of a project looked at for where it is


def local_roots(store: object, projects: Iterable[str]) -> dict[str, str]:
    """Project name -> where it is on this machine, for ``projects``."""
    roots = dict(RootedCheck(store).roots())
    list_items = getattr(store, "list_items", None)
    for name in set(projects) - roots.keys():
        if list_items is None:
            break
        for item in list_items(ItemFilter(projects=[name]), limit=SCANNED):
            root = (item.anchors or {}).get("root")
            if isinstance(root, str) and os.path.isdir(root):
                roots[name] = root
                break
    return roots


def check_here(store: object, items: Iterable[MemoryItem]) -> Mapping[int, Freshness]:
    """The team memories' freshness by id, their files read where this machine keeps their projects."""
    items = list(items)
    if not items:
        return {}
    roots = local_roots(store, {i.project for i in items})
    return with_corrections(items, shared_checker().check(items, roots))
