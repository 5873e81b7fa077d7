"""Django database aliases and PostgreSQL URLs.

The worker runtime owns its own connections (asyncpg and psycopg pools for
claims, heartbeats and LISTEN), so it needs a URL for the alias holding the
awa schema; ``database_url()`` builds it from ``settings.DATABASES``.
``database_settings(url)`` goes the other way, for settings files that read
``DATABASE_URL``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

from .conf import get_settings

# libpq connection options that may sit in a DATABASES entry's OPTIONS and
# mean the same to asyncpg and psycopg.
_URL_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "target_session_attrs")


def awa_alias() -> str:
    """The alias holding the awa schema (``AWA['DATABASE']``, default ``'default'``)."""
    return get_settings().database


def migrate_command(alias: str | None = None) -> str:
    """The command that installs the awa schema on ``alias`` (default: the awa alias).

    Plain ``migrate`` runs on ``default`` only, so any other alias is named; every hint
    (the system checks, the management commands' errors) says it this way.
    """
    alias = alias or awa_alias()
    return "python manage.py migrate" + ("" if alias == "default" else f" --database {alias}")


def awa_connection(using: str | None = None) -> Any:
    """Django's connection for ``using`` (default: the awa alias)."""
    from django.db import connections

    return connections[using or awa_alias()]


def database_url(alias: str | None = None) -> str:
    """A ``postgresql://`` URL for the worker's own connections to ``alias``.

    ``AWA['DATABASE_URL']`` wins when set (and ``alias`` is not given).
    """
    from django.db import connections

    settings = get_settings()
    if alias is None and settings.database_url:
        return settings.database_url
    entry = connections[alias or settings.database].settings_dict
    user = quote(str(entry.get("USER") or ""), safe="")
    password = quote(str(entry.get("PASSWORD") or ""), safe="")
    host = str(entry.get("HOST") or "")
    port = str(entry.get("PORT") or "")
    query: dict[str, str] = {}
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    if host.startswith("/"):  # a Unix socket directory
        query["host"] = host
        if port:
            query["port"] = port
        netloc = auth
    else:
        netloc = auth + (f"[{host}]" if ":" in host else host) + (f":{port}" if port else "")
    options = entry.get("OPTIONS") or {}
    query.update({k: str(options[k]) for k in _URL_OPTIONS if k in options})
    name = quote(str(entry.get("NAME") or ""), safe="")
    return f"postgresql://{netloc}/{name}" + (f"?{urlencode(query)}" if query else "")


def database_settings(url: str, **extra: Any) -> dict[str, Any]:
    """A ``DATABASES`` entry for a ``postgresql://`` URL (a socket directory may be given as ``?host=``)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"expected a postgresql:// URL, got {url!r}")
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    host = query.pop("host", None) or parts.hostname or ""
    port = query.pop("port", None) or (str(parts.port) if parts.port else "")
    entry: dict[str, Any] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": port,
    }
    options = {k: v for k, v in query.items() if k in _URL_OPTIONS}
    if options:
        entry["OPTIONS"] = options
    entry.update(extra)
    return entry
