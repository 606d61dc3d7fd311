"""A chat's messages as a tree, from (id, parent id) pairs alone: the branch
shown, the versions of each message, the newest branch below a message.

Plain Python: app/store/chats.py reads the pairs and the rows. Ids grow with
time, so a parent's id is always below its children's.
"""

from __future__ import annotations

Links = dict[int, "int | None"]  # message id -> its parent's (None: a first message)


def shown_path(links: Links, leaf: int | None) -> list[int]:
    """The ids from the first message to `leaf` (the newest message when the
    leaf is unknown). Where a parent is missing (rows lost on a damaged page)
    the path goes on from the newest message before it, as a chat was a line
    before branches: nothing readable is left out of view."""
    if not links:
        return []
    ordered = sorted(links)
    at = leaf if leaf in links else ordered[-1]
    path = []
    while at is not None:
        path.append(at)
        parent = links[at]
        if parent is not None and parent not in links:  # lost: the newest before it
            below = [i for i in ordered if i < parent]
            parent = below[-1] if below else None
        at = parent if parent is None or parent < at else None  # never loops
    path.reverse()
    return path


def versions_of(links: Links) -> dict[int, list[int]]:
    """For each message with other versions: its versions' ids (itself
    included), oldest first. Versions share a parent."""
    siblings: dict[int | None, list[int]] = {}
    for message_id in sorted(links):
        siblings.setdefault(links[message_id], []).append(message_id)
    return {i: ids for ids in siblings.values() if len(ids) > 1 for i in ids}


def newest_below(links: Links, message_id: int) -> int:
    """The end of the newest branch below `message_id` (itself if none)."""
    children: dict[int, int] = {}  # parent -> its newest child
    for child in sorted(links):
        if links[child] is not None:
            children[links[child]] = child
    while message_id in children:
        message_id = children[message_id]
    return message_id
