"""The images of chats (schema 5): each image's bytes kept once, by the
digest of its pixels, with its thumbnail; messages list them in their stats
({"images": [{digest, ...}]}). Qt-free; ChatStore and the import's worker
(store/bulk_write.py) write through these statements."""

from __future__ import annotations

from typing import Any

from .journal import Op

INSERT = ("INSERT OR IGNORE INTO images (digest, format, width, height, data, thumb) "
          "VALUES (?, ?, ?, ?, ?, ?)")

# Images no message lists any more (run after a chat is deleted). A stats
# cell that is not JSON, or whose images are not a list of objects, lists none.
FORGET_UNUSED = """
    DELETE FROM images WHERE digest NOT IN (
        SELECT json_extract(listed.value, '$.digest')
        FROM messages,
             json_each(CASE WHEN json_valid(messages.stats)
                                 AND json_type(messages.stats, '$.images') = 'array'
                            THEN messages.stats ELSE '{"images": []}' END, '$.images') AS listed
        WHERE listed.type = 'object')
"""


def image_row(image: Any) -> tuple:
    """An ImageFile (app/conversation/chat_images.py), or an imported image,
    as INSERT's arguments."""
    return (image.digest, image.format, int(image.width), int(image.height), bytes(image.data),
            bytes(image.thumb))


def image_ops(images: list[Any] | None) -> list[Op]:
    return [(INSERT, image_row(image)) for image in images or ()]
