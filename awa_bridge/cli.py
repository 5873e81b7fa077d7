"""``python -m awa_bridge``: operate the schema from a shell."""

from __future__ import annotations

import argparse
import os
import sys

from .errors import AwaError


def _database_url(value: str | None) -> str:
    url = value or os.environ.get("DATABASE_URL")
    if not url:
        raise SystemExit("error: give --database-url URL or set DATABASE_URL")
    return url


def _cmd_migrate(ns: argparse.Namespace) -> int:
    from .migrations import migrate

    names = migrate(_database_url(ns.database_url), dry_run=ns.dry_run)
    if ns.dry_run:
        print("would apply:" if names else "nothing to apply: the schema is up to date")
        for name in names:
            print(f"  {name}")
    elif names:
        print(f"applied {len(names)} migration(s):")
        for name in names:
            print(f"  {name}")
    else:
        print("nothing to apply: the schema is up to date")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m awa_bridge", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    migrate = commands.add_parser(
        "migrate",
        help="apply the awa schema migrations",
        description="Apply the awa schema to a PostgreSQL database. Safe to run repeatedly and "
        "from several processes at once.",
    )
    migrate.add_argument("--database-url", help="PostgreSQL URL (default: $DATABASE_URL)")
    migrate.add_argument("--dry-run", action="store_true", help="print what would be applied, change nothing")
    migrate.set_defaults(func=_cmd_migrate)
    return parser


def main(argv: list[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return int(ns.func(ns))
    except AwaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
