"""`.github/nki-bot.yml`: the per-repository configuration, with probot's `_extends`.

Parsing is pure (`parse_repo_config`); loading goes through a small async
`ConfigFetcher` so the GitHub calls stay at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nkibot.config.safeyaml import YamlRefused, safe_load
from nkibot.config.settings import Permission
from nkibot.config.targets import (
    ShapeOverride,
    TargetError,
    parse_shape,
    validate_reference,
    validate_target,
)

CONFIG_PATH = ".github/nki-bot.yml"
MAX_EXTENDS_DEPTH = 5
MAX_CONFIG_BYTES = 64 * 1024


class TargetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str
    shapes: list[ShapeOverride] = Field(default_factory=list)

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return validate_target(value)

    @field_validator("shapes", mode="before")
    @classmethod
    def _shapes(cls, value: object) -> object:
        # Accept the command-line form (`x=4x128xbf16`) as well as mappings.
        if isinstance(value, list):
            return [parse_shape(v) if isinstance(v, str) else v for v in value]
        return value


class Tolerances(BaseModel):
    model_config = ConfigDict(extra="forbid")

    atol: float | None = Field(default=None, ge=0)
    rtol: float | None = Field(default=None, ge=0)


class Requirements(BaseModel):
    """Performance a verified kernel must reach, else a neutral check run and a draft PR."""

    model_config = ConfigDict(extra="forbid")

    min_speedup: float | None = Field(default=None, gt=0)  # on hardware, vs PyTorch p50
    min_roofline_fraction: float | None = Field(default=None, gt=0, le=1)  # off hardware


class RepoConfig(BaseModel):
    """The schema of `.github/nki-bot.yml` (every key optional)."""

    model_config = ConfigDict(extra="forbid")

    targets: list[TargetSpec] = Field(default_factory=list)
    tolerances: Tolerances = Field(default_factory=Tolerances)
    turns: int | None = Field(default=None, ge=1, le=50)
    #: Turns asking for a faster kernel after the first verified one (0 turns it off).
    optimize_turns: int | None = Field(default=None, ge=0, le=10)
    requirements: Requirements = Field(default_factory=Requirements)
    model: Literal["auto", "lowering", "claude", "bedrock"] | None = None
    backend: Literal["auto", "sim", "neuron"] | None = None
    #: The Trainium generation to check kernels for (None: the runner decides).
    target: Literal["trn1", "trn2", "trn3"] | None = None
    output_dir: str = "nki_kernels/"
    min_permission: Permission | None = None
    integrate: Literal["none", "dispatch"] = "none"
    #: Triton or CUDA target -> the PyTorch reference it must match (`path::Name`).
    references: dict[str, str] = Field(default_factory=dict)
    #: The conversion dashboard issue (`/nki scan`, the label on an issue naming no target).
    dashboard: bool = True
    #: Globs of files a scan reads (default: every .py, .cu and .cuh file).
    scan: list[str] = Field(default_factory=list)
    #: Globs a scan skips (tests, vendored code...).
    exclude: list[str] = Field(default_factory=list)

    @field_validator("targets", mode="before")
    @classmethod
    def _targets(cls, value: object) -> object:
        if isinstance(value, list):
            return [{"target": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("references")
    @classmethod
    def _references(cls, value: dict[str, str]) -> dict[str, str]:
        return {validate_target(k): validate_reference(v) for k, v in value.items()}

    @field_validator("output_dir")
    @classmethod
    def _output_dir(cls, value: str) -> str:
        parts = value.strip("/").split("/")
        if value.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError("a relative directory without `..`")
        return value.strip("/") + "/"


@dataclass(frozen=True)
class ConfigError:
    """Why the config was refused: the field (dotted path) and the form expected there."""

    field: str
    expected: str
    source: str = CONFIG_PATH

    def message(self) -> str:
        return f"`{self.source}`: `{self.field}` is invalid; expected {self.expected}."


def _error_from_validation(exc: ValidationError) -> ConfigError:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    ctx = err.get("ctx", {}).get("error")
    expected = str(ctx) if isinstance(ctx, TargetError | ValueError) else err["msg"]
    if err["type"] == "extra_forbidden":
        expected = "one of the documented keys (see the README's configuration reference)"
    return ConfigError(field=field, expected=expected)


def load_yaml_mapping(text: str) -> dict[str, Any] | ConfigError:
    """Parse YAML text into a mapping (empty file = empty mapping), or say why not."""
    if len(text) > MAX_CONFIG_BYTES:
        return ConfigError("(file)", f"a file under {MAX_CONFIG_BYTES} bytes")
    try:
        data = safe_load(text)
    except YamlRefused as exc:
        return ConfigError("(file)", f"plain YAML without aliases or deep nesting ({exc})")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(file)"
        return ConfigError(where, "valid YAML")
    if data is None:
        return {}
    if not isinstance(data, dict):
        return ConfigError("(top level)", "a mapping of keys to values")
    return data


def validate_config(data: dict[str, Any]) -> RepoConfig | ConfigError:
    body = {k: v for k, v in data.items() if k != "_extends"}
    try:
        return RepoConfig.model_validate(body)
    except ValidationError as exc:
        return _error_from_validation(exc)


def parse_repo_config(text: str) -> RepoConfig | ConfigError:
    """Validate one file's text on its own (no `_extends` resolution)."""
    data = load_yaml_mapping(text)
    return data if isinstance(data, ConfigError) else validate_config(data)


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` wins; mappings merge key by key, everything else (lists too) is replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class ConfigRef:
    owner: str
    repo: str
    path: str = CONFIG_PATH

    def __str__(self) -> str:
        return f"{self.owner}/{self.repo}:{self.path}"


def extends_ref(value: object, here: ConfigRef) -> ConfigRef | ConfigError:
    """`.github`, `other-repo`, `org/repo` or `org/repo:path` -> where to read the base."""
    if not isinstance(value, str) or not value.strip():
        return ConfigError("_extends", "`repo`, `owner/repo` or `owner/repo:path`")
    spec, _, path = value.strip().partition(":")
    owner, slash, repo = spec.partition("/")
    if not slash:
        owner, repo = here.owner, spec
    bad = [p for p in (owner, repo) if not p or "/" in p or p in (".", "..")]
    if bad or (path and (path.startswith("/") or ".." in path.split("/"))):
        return ConfigError("_extends", "`repo`, `owner/repo` or `owner/repo:path`")
    return ConfigRef(owner, repo, path or here.path)


class ConfigFetcher(Protocol):
    async def __call__(self, owner: str, repo: str, path: str) -> str | None:
        """The file's text, or None when the file (or the repository) does not exist."""
        ...


async def load_repo_config(
    fetch: ConfigFetcher, owner: str, repo: str
) -> RepoConfig | ConfigError:
    """Read and merge the config chain; no file anywhere means the defaults.

    Like probot, a repository without the file falls back to `<owner>/.github`.
    """
    here = ConfigRef(owner, repo)
    text = await fetch(owner, repo, here.path)
    if text is None and repo != ".github":
        here = ConfigRef(owner, ".github")
        text = await fetch(here.owner, here.repo, here.path)
    if text is None:
        return RepoConfig()
    merged: dict[str, Any] = {}
    seen = {str(here)}
    for _ in range(MAX_EXTENDS_DEPTH + 1):
        data = load_yaml_mapping(text)
        if isinstance(data, ConfigError):
            return ConfigError(data.field, data.expected, source=str(here))
        merged = deep_merge(data, merged)
        if "_extends" not in data:
            return validate_config(merged)
        ref = extends_ref(data["_extends"], here)
        if isinstance(ref, ConfigError):
            return ConfigError(ref.field, ref.expected, source=str(here))
        if str(ref) in seen:
            return ConfigError("_extends", f"no cycle (`{ref}` was already read)", str(here))
        seen.add(str(ref))
        base = await fetch(ref.owner, ref.repo, ref.path)
        if base is None:
            return ConfigError("_extends", f"an existing file (`{ref}` was not found)", str(here))
        here, text = ref, base
    return ConfigError("_extends", f"a chain of at most {MAX_EXTENDS_DEPTH} files", str(here))
