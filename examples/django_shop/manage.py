#!/usr/bin/env python
"""manage.py of the shop example (run from anywhere: it puts its own folder on sys.path)."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
