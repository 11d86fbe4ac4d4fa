"""YAML from repositories and issue bodies, parsed with its size known in advance.

`yaml.safe_load` expands aliases: a few anchors that each list the previous one nine
times (`a: &a [x, x, ...]`, `b: &b [*a, *a, ...]`, ...) make a 1 KB file a tree of 9^9
nodes, and merging two such files (`_extends`) walks every one of them. Nothing nkibot
reads needs an alias, so the event stream is checked first: an alias, more than
`MAX_NODES` nodes or nesting deeper than `MAX_DEPTH` is refused before anything is built.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_NODES = 20_000
MAX_DEPTH = 32


class YamlRefused(ValueError):
    """The text is valid YAML that nkibot will not build (the message says why)."""


def safe_load(text: str, *, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH) -> Any:
    """`yaml.safe_load(text)` for text without aliases and of bounded size and depth.

    Raises yaml.YAMLError for invalid YAML and YamlRefused for what is refused."""
    nodes = depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise YamlRefused("YAML aliases (`*name`) are not accepted")
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
            if nodes > max_nodes:
                raise YamlRefused(f"more than {max_nodes} YAML nodes")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > max_depth:
                raise YamlRefused(f"YAML nested deeper than {max_depth} levels")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
    return yaml.safe_load(text)
