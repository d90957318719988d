"""The package indexes this host installs from: where a Cairn SDK on it came from, and so its release.

pip and uv do not record the index a wheel was installed from, but their configuration says where the
next install comes from; a Cairn channel index (``<repository>/channels/<channel>/simple/<family>/``) in it
names the published repository, and so the release's own matrix. Read, in the installers' precedence
(the first wins): the variables ``PIP_INDEX_URL``, ``UV_DEFAULT_INDEX``, ``UV_INDEX_URL``,
``PIP_EXTRA_INDEX_URL``, ``UV_INDEX``, ``UV_EXTRA_INDEX_URL`` from ``proc/self/environ``, then the
``pip.conf`` of each environment (``<prefix>/pip.conf`` beside its site-packages), the user's
(``root/.config/pip/pip.conf``, ``root/.pip/pip.conf``, ``home/*/.config/pip/pip.conf``,
``home/*/.pip/pip.conf``) and the system's (``etc/pip.conf``, ``etc/xdg/pip/pip.conf``):
``index-url`` and ``extra-index-url`` of ``[global]`` and ``[install]``.
"""

from __future__ import annotations

import configparser
from collections.abc import Iterable
from pathlib import Path

from cairn.doctor.read.files import Root, text_of
from cairn.doctor.snapshot import IndexSource

INDEX_VARIABLES = ("PIP_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL")
_USER_CONFIGS = ("root/.config/pip/pip.conf", "root/.pip/pip.conf", "home/*/.config/pip/pip.conf", "home/*/.pip/pip.conf")
_SYSTEM_CONFIGS = ("etc/pip.conf", "etc/xdg/pip/pip.conf")


def read_indexes(r: Root, sites: Iterable[Path]) -> tuple[IndexSource, ...]:
    out: list[IndexSource] = []
    environ = _environ(r)
    for name in INDEX_VARIABLES:
        out += [IndexSource(url, name) for url in _urls(environ.get(name, ""))]
    configs: list[Path] = []
    for site in sites:
        prefix = site.parent.parent.parent  # <prefix>/lib/python3.X/site-packages
        configs.append(prefix / "pip.conf")
    for pattern in (*_USER_CONFIGS, *_SYSTEM_CONFIGS):
        configs += sorted(r.base.glob(pattern))
    for config in configs:
        out += _from_config(r, config)
    unique: list[IndexSource] = []
    for source in out:
        if source.url not in {u.url for u in unique}:
            unique.append(source)
    return tuple(unique)


def _environ(r: Root) -> dict[str, str]:
    env = {}
    for item in text_of(r("proc/self/environ")).split("\0"):
        key, sep, value = item.partition("=")
        if sep and key in INDEX_VARIABLES:
            env[key] = value
    return env


def _urls(value: str) -> list[str]:
    """pip separates several URLs by whitespace; uv's UV_INDEX also allows ``name=url``."""
    return [item.split("=", 1)[1] if "=" in item.split("://", 1)[0] else item for item in value.split()]


def _from_config(r: Root, config: Path) -> list[IndexSource]:
    text = text_of(config)
    if not text:
        return []
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []  # a broken pip.conf is pip's error to report; it names no index the doctor can trust
    shown = "/" + str(config.relative_to(r.base)) if config.is_relative_to(r.base) else str(config)
    found = []
    for section in ("install", "global"):
        for key in ("index-url", "extra-index-url"):
            if parser.has_option(section, key):
                found += [IndexSource(url, f"{shown} [{section}] {key}") for url in _urls(parser.get(section, key))]
    return found
