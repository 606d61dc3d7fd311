"""A JSON schema checked before the grammar engine sees it (plain Python).

llguidance compiles a schema recursively, about 8 KiB of native stack per
level of nesting with `$ref`s followed: a flat 74 KB schema whose `$defs`
form a chain 1,000 long overflowed an 8 MiB thread stack and ended the
process. So what it is given is bounded here first: subschemas reached
(each `$ref` target once), and the deepest chain of nesting through
`$ref`s. Both walks are iterative, so Python's own recursion limit plays no
part, and they stop as soon as a bound is passed.

A schema no finite JSON value can match (a required property whose schema
requires itself again, with no way out) would otherwise let the model write
`{"a": {"a": ...` until max_tokens; it is refused here, naming where. The
productivity check follows JSON Schema's own semantics as llguidance does
(an untyped schema allows every type, so `required` alone never traps);
what llguidance itself detects (`false`, empty enums, min > max, clashing
types) it reports when the grammar is built.
"""

from __future__ import annotations

from urllib.parse import unquote

# Levels of nesting, `$ref`s followed. Real schemas nest a few dozen levels;
# llguidance crashed past ~800 on an 8 MiB stack, and compiles on a thread
# with a 64 MiB one (engine/runtime/constrain.py): a wide margin either way.
MAX_DEPTH = 128
MAX_SUBSCHEMAS = 20_000  # each $ref target counted once

_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_ONE = ("additionalProperties", "items", "contains", "not", "if", "then", "else",
        "propertyNames", "unevaluatedProperties", "unevaluatedItems", "additionalItems")
_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


class SchemaError(ValueError):
    """A schema refused before compiling; the message says why."""


def check_bounds(schema) -> None:
    """Raise SchemaError when `schema` (parsed JSON) nests too deep or is too
    large for the grammar engine to be given it."""
    _Graph(schema).check_depth()


def check_satisfiable(schema) -> None:
    """Raise SchemaError when no finite JSON value matches `schema` (run after
    llguidance built it: its own messages for what it detects are sharper)."""
    _Graph(schema).check_productive()


class _Graph:
    """The schema's subschemas as nodes (by identity: a `$ref` resolves to
    the very object it names), with their nesting edges and `$ref`s."""

    def __init__(self, root):
        self.root = root
        self.paths: dict[int, str] = {id(root): "#"}  # where a node first appears

    # ---- edges -------------------------------------------------------------------
    def children(self, node) -> list[tuple[str, object]]:
        """(where, subschema) for each nested subschema, then the `$ref`
        target (resolved, if local; `where` is then the ref itself)."""
        if not isinstance(node, dict):
            return []
        out = []
        for key in _MAPS:
            value = node.get(key)
            if isinstance(value, dict):
                out.extend((f"{key}/{name}", v) for name, v in value.items()
                           if isinstance(v, (dict, bool)))
        for key in _ONE:
            value = node.get(key)
            if isinstance(value, (dict, bool)):
                out.append((key, value))
        for key in _LISTS:
            value = node.get(key)
            if isinstance(value, list):
                out.extend((f"{key}/{i}", v) for i, v in enumerate(value)
                           if isinstance(v, (dict, bool)))
        target = self.resolve(node.get("$ref"))
        if target is not None:
            out.append((node["$ref"], target))
        return out

    def resolve(self, ref):
        """A local `$ref` ("#", "#/$defs/a", JSON-pointer escapes) or None."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            return None  # remote or anchor refs: llguidance says what it makes of them
        node = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node if isinstance(node, (dict, bool)) else None

    def _note(self, child, where: str, parent_path: str) -> None:
        if isinstance(child, dict) and id(child) not in self.paths:
            self.paths[id(child)] = where if where.startswith("#") else f"{parent_path}/{where}"

    # ---- size and depth ------------------------------------------------------------
    def check_depth(self) -> None:
        """Height of every node (longest nesting below it, a `$ref` back to a
        node still being walked counting as a leaf), memoised, so a long
        chain is measured whatever order its links are met in."""
        height: dict[int, int] = {}
        on_path = {id(self.root)}
        stack = [[self.root, iter(self.children(self.root)), 0]]
        while stack:
            frame = stack[-1]
            node, rest, best = frame
            path = self.paths[id(node)]
            where, child = next(rest, (None, None))
            if where is None:
                stack.pop()
                on_path.discard(id(node))
                height[id(node)] = best + 1
                if best + 1 > MAX_DEPTH:
                    raise SchemaError(self._too_deep(path))
                if stack:
                    stack[-1][2] = max(stack[-1][2], best + 1)
                continue
            if not isinstance(child, dict):
                frame[2] = max(best, 1)
                continue
            key = id(child)
            if key in height or key in on_path:
                frame[2] = max(best, height.get(key, 0))
                continue
            if len(height) + len(stack) >= MAX_SUBSCHEMAS:
                raise SchemaError(f"The JSON schema has more than {MAX_SUBSCHEMAS:,} "
                                  "subschemas.")
            self._note(child, where, path)
            if len(stack) >= MAX_DEPTH:
                raise SchemaError(self._too_deep(self.paths[key]))
            on_path.add(key)
            stack.append([child, iter(self.children(child)), 0])

    @staticmethod
    def _too_deep(path: str) -> str:
        return (f"The JSON schema nests more than {MAX_DEPTH} levels deep (counting "
                f"$ref links), at {path}.")

    # ---- satisfiability --------------------------------------------------------------
    def check_productive(self) -> None:
        """Which subschemas some finite JSON value can match: an AND/OR graph
        (a schema needs its $ref, its allOf and, when its type is object or
        array, what it requires; anyOf/oneOf and a list of types need one
        branch), solved by propagation from what needs nothing, in time
        linear in its size (as for a grammar's productive symbols)."""
        needs, refs = _Needs(), []
        todo, seen = [self.root], set()
        while todo:
            node = todo.pop()
            if id(node) not in seen:
                seen.add(id(node))
                todo.extend(self._add_needs(needs, node, refs))
        proven = needs.met()
        if id(self.root) in proven:
            return
        traps = [self.paths.get(id(n), "#") for n in refs if id(n) not in proven]
        if not traps:
            raise SchemaError("The JSON schema cannot be satisfied: no JSON value matches it.")
        raise SchemaError(
            "The JSON schema cannot be satisfied: no finite JSON value matches it (at "
            f"{traps[-1]}, a value is required that must hold another like it, without end).")

    def _add_needs(self, needs: "_Needs", node, refs: list) -> list:
        """Add what `node` needs to `needs` (a node with a `$ref` to `refs`);
        returns the subschemas it needs, to be added in turn."""
        if not isinstance(node, dict):
            needs.add(id(node), [], any_of=node is False)  # nothing matches `false`
            return []
        members: list = []
        target = self.resolve(node.get("$ref"))
        if target is not None:
            members.append(target)
            refs.append(node)
        members.extend(m for m in node.get("allOf") or [] if isinstance(m, (dict, bool)))
        keys = [id(m) for m in members]
        for group in ("anyOf", "oneOf"):
            branches = [b for b in node.get(group) or [] if isinstance(b, (dict, bool))]
            if branches:
                keys.append(needs.add(needs.fresh(), [id(b) for b in branches], any_of=True))
                members.extend(branches)
        types = node.get("type")
        types = [types] if isinstance(types, str) else types
        if isinstance(types, list) and types and all(t in ("object", "array") for t in types):
            branches = []
            for kind in dict.fromkeys(types):
                needed = self._needed(node, kind)
                branches.append(needs.add(needs.fresh(), [id(n) for n in needed]))
                members.extend(needed)
            keys.append(needs.add(needs.fresh(), branches, any_of=True))
        needs.add(id(node), keys)
        for where, child in self.children(node):
            self._note(child, where, self.paths.get(id(node), "#"))
        return members

    @staticmethod
    def _needed(node: dict, kind: str) -> list:
        """What a value of type `kind` must contain to match `node`: the
        schemas of its required properties, or of its first items."""
        if kind == "object":
            props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
            extra = node.get("additionalProperties", True)
            out = []
            for name in node.get("required") or []:
                if not isinstance(name, str):
                    continue
                if isinstance(props.get(name), (dict, bool)):
                    out.append(props[name])
                elif not node.get("patternProperties") and isinstance(extra, (dict, bool)):
                    out.append(extra)
            return out
        least = node.get("minItems", 0)
        if isinstance(least, bool) or not isinstance(least, int) or least < 1:
            return []
        prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else []
        items = node.get("items", True)
        out = [p for p in prefix[:least] if isinstance(p, (dict, bool))]
        if least > len(prefix) and isinstance(items, (dict, bool)):
            out.append(items)
        return out


class _Needs:
    """An AND/OR graph over keys (a node's id, or a fresh key for a group
    inside a node): a key is met when all its members are (AND), or one of
    them (OR); `met` propagates from the keys that need nothing."""

    def __init__(self):
        self.needs: dict[int, int] = {}  # key -> how many more of its needs must be met
        self.parents: dict[int, list[int]] = {}
        self.ready: list[int] = []
        self._fresh = iter(range(-1, -(1 << 62), -1))  # never a live object's id

    def fresh(self) -> int:
        """A key for a group inside a node."""
        return next(self._fresh)

    def add(self, key: int, members: list[int], any_of: bool = False) -> int:
        """`key` needs all of `members` (or one of them, `any_of`); returns it."""
        self.needs[key] = 1 if any_of else len(members)
        if not any_of and not members:
            self.ready.append(key)
        for m in members:
            self.parents.setdefault(m, []).append(key)
        return key

    def met(self) -> set[int]:
        """Every key whose needs can be met."""
        proven = set()
        while self.ready:
            key = self.ready.pop()
            if key in proven:
                continue
            proven.add(key)
            for parent in self.parents.get(key, ()):
                self.needs[parent] -= 1
                if self.needs[parent] <= 0:
                    self.ready.append(parent)
        return proven
