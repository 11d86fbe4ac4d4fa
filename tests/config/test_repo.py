"""`.github/nki-bot.yml`: schema, one-line errors naming the field, and `_extends` chains."""

from __future__ import annotations

import pytest

from nkibot.config.repo import (
    ConfigError,
    ConfigRef,
    RepoConfig,
    deep_merge,
    extends_ref,
    load_repo_config,
    parse_repo_config,
)

FULL = """
targets:
  - src/models/norm.py::RMSNorm
  - target: kernels/add.py::add_kernel
    shapes: [x=4x128xbf16, "y=4x128"]
tolerances: {atol: 1.0e-3, rtol: 1.0e-2}
turns: 6
model: claude
backend: sim
output_dir: generated/nki
min_permission: maintain
integrate: dispatch
references:
  kernels/add.py::add_kernel: ref/add.py::Add
"""


class Files:
    """An in-memory ConfigFetcher: {(owner, repo, path): text}."""

    def __init__(self, files: dict[tuple[str, str, str], str]) -> None:
        self.files = files
        self.reads: list[tuple[str, str, str]] = []

    async def __call__(self, owner: str, repo: str, path: str) -> str | None:
        self.reads.append((owner, repo, path))
        return self.files.get((owner, repo, path))


P = ".github/nki-bot.yml"


class TestParseRepoConfig:
    def test_full_schema(self) -> None:
        """Every documented key parses, with shapes in the command-line form."""
        cfg = parse_repo_config(FULL)
        assert isinstance(cfg, RepoConfig)
        assert [t.target for t in cfg.targets] == ["src/models/norm.py::RMSNorm",
                                                   "kernels/add.py::add_kernel"]
        assert cfg.targets[1].shapes[0].shape == (4, 128)
        assert cfg.targets[1].shapes[0].dtype == "bfloat16"
        got = (cfg.tolerances.atol, cfg.turns, cfg.model, cfg.backend)
        assert got == (1e-3, 6, "claude", "sim")
        assert cfg.output_dir == "generated/nki/" and cfg.integrate == "dispatch"
        assert cfg.references == {"kernels/add.py::add_kernel": "ref/add.py::Add"}

    def test_empty_file_is_defaults(self) -> None:
        """An empty file means every default (output dir nki_kernels/, integrate none)."""
        cfg = parse_repo_config("")
        assert cfg == RepoConfig() and isinstance(cfg, RepoConfig)
        assert cfg.output_dir == "nki_kernels/" and cfg.integrate == "none"

    @pytest.mark.parametrize(("text", "field"), [
        ("turns: many", "turns"),
        ("turns: 0", "turns"),
        ("model: gpt", "model"),
        ("targets: [../evil.py::X]", "targets.0.target"),
        ("targets: [src/a.py::not-an-ident]", "targets.0.target"),
        ("output_dir: /etc", "output_dir"),
        ("colour: blue", "colour"),
        ("tolerances: {atol: -1}", "tolerances.atol"),
        ("- just\n- a list", "(top level)"),
        ("turns: [unclosed", "line 1"),
    ])
    def test_errors_name_the_field(self, text: str, field: str) -> None:
        """A bad file gives a ConfigError naming the field and the expected form."""
        err = parse_repo_config(text)
        assert isinstance(err, ConfigError)
        assert err.field == field
        assert err.expected and field in err.message()


class TestExtends:
    def test_refs(self) -> None:
        """`repo`, `owner/repo` and `owner/repo:path` resolve relative to the current file."""
        here = ConfigRef("acme", "models")
        assert extends_ref(".github", here) == ConfigRef("acme", ".github", P)
        assert extends_ref("other/base", here) == ConfigRef("other", "base", P)
        assert extends_ref("other/base:cfg/x.yml", here) == ConfigRef("other", "base", "cfg/x.yml")
        assert isinstance(extends_ref("a/b:../x", here), ConfigError)
        assert isinstance(extends_ref(3, here), ConfigError)

    def test_deep_merge_child_wins(self) -> None:
        """Mappings merge key by key; lists and scalars of the child replace the base's."""
        base = {"tolerances": {"atol": 1, "rtol": 2}, "targets": ["a"], "turns": 3}
        child = {"tolerances": {"atol": 5}, "targets": ["b"]}
        assert deep_merge(base, child) == {"tolerances": {"atol": 5, "rtol": 2},
                                           "targets": ["b"], "turns": 3}

    async def test_chain_from_org_dot_github(self) -> None:
        """`_extends: .github` inherits the org's defaults; the repository's keys win."""
        files = Files({
            ("acme", "models", P): "_extends: .github\nturns: 4\ntolerances: {atol: 0.5}\n",
            ("acme", ".github", P): "turns: 9\nmodel: lowering\ntolerances: {rtol: 0.1}\n",
        })
        cfg = await load_repo_config(files, "acme", "models")
        assert isinstance(cfg, RepoConfig)
        assert (cfg.turns, cfg.model, cfg.tolerances.atol, cfg.tolerances.rtol) == (
            4, "lowering", 0.5, 0.1)

    async def test_missing_file_falls_back_to_org(self) -> None:
        """With no file in the repository, the org's `.github` file applies (probot's rule)."""
        files = Files({("acme", ".github", P): "turns: 2\n"})
        cfg = await load_repo_config(files, "acme", "models")
        assert isinstance(cfg, RepoConfig) and cfg.turns == 2
        assert await load_repo_config(Files({}), "acme", "models") == RepoConfig()

    async def test_cycle_is_an_error(self) -> None:
        """A cycle of `_extends` ends with a ConfigError, not a loop."""
        files = Files({("acme", "a", P): "_extends: b\n", ("acme", "b", P): "_extends: a\n"})
        err = await load_repo_config(files, "acme", "a")
        assert isinstance(err, ConfigError) and err.field == "_extends" and "cycle" in err.expected

    async def test_depth_is_bounded(self) -> None:
        """A chain longer than the limit is refused after a bounded number of reads."""
        files = Files({("acme", f"r{i}", P): f"_extends: r{i + 1}\n" for i in range(20)})
        err = await load_repo_config(files, "acme", "r0")
        assert isinstance(err, ConfigError) and err.field == "_extends"
        assert len(files.reads) <= 7

    async def test_bad_base_names_its_source(self) -> None:
        """An invalid inherited file is reported with the file it came from."""
        files = Files({("acme", "models", P): "_extends: base\n",
                       ("acme", "base", P): "turns: [\n"})
        err = await load_repo_config(files, "acme", "models")
        assert isinstance(err, ConfigError) and err.source == "acme/base:.github/nki-bot.yml"

    async def test_missing_base_is_an_error(self) -> None:
        """Extending a file that does not exist is a ConfigError naming `_extends`."""
        err = await load_repo_config(Files({("acme", "m", P): "_extends: gone\n"}), "acme", "m")
        assert isinstance(err, ConfigError) and "not found" in err.expected


def billion_laughs(levels: int = 9, width: int = 9, key: str = "l") -> str:
    """About 1 KB of YAML whose aliases expand to width ** levels leaves."""
    lines = [f"{key}0: &{key}0 [" + ", ".join(["x"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"{key}{i}: &{key}{i} [" + ", ".join([f"*{key}{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


class TestYamlBounds:
    """Issue 26, class 4: YAML aliases and `_extends` cannot blow up the merge."""

    async def test_aliases_linked_by_extends_are_a_config_error(self) -> None:
        """Two ~1 KB files of nested aliases joined by `_extends` (9^9 paths for
        deep_merge) end at once in a ConfigError naming the refusal."""
        child = "_extends: base\n" + billion_laughs(key="a")
        base = billion_laughs(key="a")
        assert len(child) < 1500
        files = Files({("acme", "models", P): child, ("acme", "base", P): base})
        err = await load_repo_config(files, "acme", "models")
        assert isinstance(err, ConfigError) and "aliases" in err.expected
        assert "nki-bot.yml" in err.message()

    @pytest.mark.parametrize(("text", "why"), [
        ("a: &x 1\nb: *x\n", "aliases"),
        ("a: " + "[" * 40 + "]" * 40 + "\n", "deeper than 32"),
        ("a: [" + ",".join(["1"] * 25_000) + "]\n", "more than 20000"),
    ], ids=["alias", "deep", "wide"])
    def test_refused_before_anything_is_built(self, text: str, why: str) -> None:
        err = parse_repo_config(text)
        assert isinstance(err, ConfigError) and why in err.expected

    def test_issue_body_yaml_block_refuses_aliases(self) -> None:
        from nkibot.handlers.issue_body import targets_from_issue_body

        body = "```yaml\n" + billion_laughs() + "targets: [src/a.py::A]\n```\n"
        found = targets_from_issue_body(body)
        assert isinstance(found, str) and "aliases" in found
