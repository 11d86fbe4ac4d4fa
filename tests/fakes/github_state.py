"""In-memory repositories for the GitHub double: blobs, flat trees, commits, refs, threads."""

from __future__ import annotations

import hashlib
import io
import itertools
import tarfile
from dataclasses import dataclass, field
from typing import Any


def git_sha(kind: str, data: bytes) -> str:
    return hashlib.sha1(f"{kind} {len(data)}\0".encode() + data).hexdigest()


@dataclass
class CommitObj:
    sha: str
    tree: str
    parents: list[str]
    message: str


@dataclass
class Pull:
    number: int
    head_ref: str
    head_repo: str
    base_ref: str
    title: str
    body: str
    state: str = "open"
    user: str = "octocat"
    draft: bool = False


@dataclass
class Repo:
    full_name: str
    id: int
    installation_id: int
    default_branch: str = "main"
    private: bool = False
    blobs: dict[str, bytes] = field(default_factory=dict)
    #: tree sha -> {path: blob sha}; trees are flat (full paths), which is all the API needs.
    trees: dict[str, dict[str, str]] = field(default_factory=dict)
    commits: dict[str, CommitObj] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)  # "heads/main" -> sha
    permissions: dict[str, str] = field(default_factory=dict)  # login -> role
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    pulls: dict[int, Pull] = field(default_factory=dict)

    @property
    def owner(self) -> str:
        return self.full_name.split("/")[0]

    @property
    def name(self) -> str:
        return self.full_name.split("/")[1]

    def put_blob(self, data: bytes) -> str:
        sha = git_sha("blob", data)
        self.blobs[sha] = data
        return sha

    def put_tree(self, entries: dict[str, str]) -> str:
        listing = "".join(f"{p}\0{s}\n" for p, s in sorted(entries.items())).encode()
        sha = git_sha("tree", listing)
        self.trees[sha] = dict(entries)
        return sha

    def put_commit(self, tree: str, parents: list[str], message: str) -> str:
        text = f"tree {tree}\n" + "".join(f"parent {p}\n" for p in parents) + "\n" + message
        sha = git_sha("commit", text.encode())
        self.commits[sha] = CommitObj(sha, tree, list(parents), message)
        return sha

    def commit_files(self, files: dict[str, str | bytes | None], branch: str,
                     message: str = "update") -> str:
        """Commit `files` over the branch head (None deletes a path); move the branch."""
        parent = self.refs.get(f"heads/{branch}")
        entries = dict(self.trees[self.commits[parent].tree]) if parent else {}
        for path, content in files.items():
            if content is None:
                entries.pop(path, None)
            else:
                data = content.encode() if isinstance(content, str) else content
                entries[path] = self.put_blob(data)
        sha = self.put_commit(self.put_tree(entries), [parent] if parent else [], message)
        self.refs[f"heads/{branch}"] = sha
        return sha

    def resolve(self, ref: str) -> str | None:
        """A commit sha from a sha, a branch name, `heads/x` or `refs/heads/x`."""
        if ref in self.commits:
            return ref
        ref = ref.removeprefix("refs/")
        return self.refs.get(ref) or self.refs.get(f"heads/{ref}") or self.refs.get(f"tags/{ref}")

    def files_at(self, ref: str) -> dict[str, bytes]:
        sha = self.resolve(ref)
        if sha is None:
            raise KeyError(f"{self.full_name} has no ref {ref}")
        return {p: self.blobs[b] for p, b in self.trees[self.commits[sha].tree].items()}

    def is_ancestor(self, old: str, new: str) -> bool:
        seen, todo = set(), [new]
        while todo:
            sha = todo.pop()
            if sha == old:
                return True
            if sha in seen or sha not in self.commits:
                continue
            seen.add(sha)
            todo.extend(self.commits[sha].parents)
        return False

    def tarball(self, sha: str) -> bytes:
        """A .tar.gz like codeload's: one top directory `<owner>-<repo>-<sha7>/`."""
        top = f"{self.owner}-{self.name}-{sha[:7]}"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for path, data in sorted(self.files_at(sha).items()):
                info = tarfile.TarInfo(f"{top}/{path}")
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()


class Ids:
    """Monotonic ids shared by all objects of one double."""

    def __init__(self, start: int = 1000) -> None:
        self._next = itertools.count(start)

    def __call__(self) -> int:
        return next(self._next)
