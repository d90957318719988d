"""Render ``dockerfiles/<template>.Dockerfile.j2`` with every input explicit.

Rendering is strict: a variable the template uses but the caller did not give is an error, so a
Dockerfile never silently builds from an empty base reference or version.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jinja2

from cairn.errors import CairnError
from cairn.paths import repo_root

TEMPLATE_SUFFIX = ".Dockerfile.j2"


def dockerfiles_dir() -> Path:
    return repo_root() / "dockerfiles"


def render(template: str, values: Mapping[str, Any], directory: Path | None = None) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(directory or dockerfiles_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # Dockerfiles, not HTML
    )
    try:
        text = env.get_template(template + TEMPLATE_SUFFIX).render(template=template, **values)
    except jinja2.TemplateNotFound:
        raise CairnError(f"no template dockerfiles/{template}{TEMPLATE_SUFFIX} — add it or fix the recipe's template") from None
    except jinja2.UndefinedError as exc:
        raise CairnError(f"template {template}{TEMPLATE_SUFFIX}: {exc.message} — pass it when rendering") from None
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"


def render_dockerfile(inputs: Mapping[str, Any], parent_repo: str, parent_digest: str, wheels: list[dict[str, Any]]) -> str:
    """The Dockerfile of an image action, from its inputs plus what is known only at build time."""
    return render(inputs["recipe"]["template"], {
        "target": inputs["target"], "family": inputs["family"], "release": inputs["release"],
        "rocm": inputs["rocm"], "labels": inputs["labels"], "recipe": inputs["recipe"], "version": inputs["version"],
        "component": {"version": inputs["version"]}, "wheels": wheels, "env": inputs.get("env", {}),
        "parent": {"repo": parent_repo, "digest": parent_digest},
    })
