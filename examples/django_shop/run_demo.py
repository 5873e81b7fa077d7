"""The Django example end to end, in one command.

    python examples/django_shop/run_demo.py            # migrate, place orders, run the worker, report
    python examples/django_shop/run_demo.py --serve    # ... then serve the admin until Ctrl-C

Uses ``DATABASE_URL`` when it is set, otherwise an embedded PostgreSQL (see
shop_project/settings.py): nothing to install but the package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TERMINAL = ("completed", "failed", "cancelled")
DEMO_USER = ("admin", "admin")


def setup_django() -> None:
    sys.path.insert(0, str(HERE))
    os.environ["DJANGO_SETTINGS_MODULE"] = "shop_project.settings"  # this example's, whatever the shell says
    import django

    django.setup()


def manage(*args: str) -> list[str]:
    return [sys.executable, str(HERE / "manage.py"), *args]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", action="store_true", help="afterwards, serve the admin on 127.0.0.1:8000")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--timeout", type=float, default=60.0, help="give up waiting for the jobs after this long")
    ns = parser.parse_args(argv)

    where = "DATABASE_URL" if os.environ.get("DATABASE_URL") else "an embedded PostgreSQL (no DATABASE_URL set)"
    setup_django()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from shop.models import Order, SentEmail
    from shop.services import PaymentDeclined, place_order

    from awa_django.models import Job

    print(f"Database: {where}")
    print("1. manage.py migrate (the awa schema comes with the awa_django migrations)")
    call_command("migrate", verbosity=0)
    print("   done: Django's tables, the shop's tables and the awa schema are in place")

    users = get_user_model()
    if not users.objects.filter(username=DEMO_USER[0]).exists():
        users.objects.create_superuser(DEMO_USER[0], "admin@example.com", DEMO_USER[1])
    print(f"2. demo user for the admin: {DEMO_USER[0]} / {DEMO_USER[1]}")

    print("3. placing orders: each order and its confirmation job commit in one transaction.atomic()")
    placed = []
    for email, item, cents in (
        ("ada@example.com", "Analytical Engine manual", 4200),
        ("flaky@example.com", "Difference Engine gears", 1999),
        ("grace@example.com", "COBOL pocket guide", 1250),
    ):
        order = place_order(email, item, cents)
        job = Job.objects.filter(kind="shop.tasks.send_confirmation_email", args__order_id=order.id).get()
        placed.append((order, job.id))
        print(f"   order {order.id} for {email}: confirmation job {job.id} enqueued ({job.state})")
    jobs_before = Job.objects.count()
    try:
        place_order("eve@example.com", "Enigma rotor", 9900, decline=True)
    except PaymentDeclined as exc:
        print(f"   order for eve@example.com: {exc} -> rolled back; no order and no job left behind")
    assert Job.objects.count() == jobs_before and not Order.objects.filter(customer_email="eve@example.com").exists()

    print("4. running `manage.py awa_worker` until every job is done")
    ids = [job_id for _, job_id in placed]
    worker = subprocess.Popen(
        manage("awa_worker", "--verbosity", "1"),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + ns.timeout
    try:
        while Job.objects.filter(id__in=ids).exclude(state__in=TERMINAL).exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    for line in output.splitlines():
        print(f"   | {line}")
    print(f"   worker stopped on SIGTERM with exit code {worker.returncode}")

    print("5. what happened")
    ok = True
    for order, job_id in placed:
        job = Job.objects.get(id=job_id)
        order.refresh_from_db()
        retries = f", after {len(job.errors)} failed attempt(s): {job.errors[0]['error']}" if job.errors else ""
        print(f"   job {job.id}: {job.state} on attempt {job.attempt}{retries}")
        ok &= job.state == "completed" and order.confirmation_sent
    emails = SentEmail.objects.filter(order__in=[order for order, _ in placed]).order_by("id")
    for sent in emails:
        print(f"   outbox: to {sent.to}: {sent.subject!r} (sent on attempt {sent.attempt})")
    ok &= emails.count() == len(placed) and worker.returncode == 0
    print("   every order confirmed exactly once" if ok else "   SOMETHING WENT WRONG (see above)")

    if ns.serve:
        print(f"6. serving the admin at http://127.0.0.1:{ns.port}/admin/ (log in as admin / admin); Ctrl-C stops")
        with contextlib.suppress(KeyboardInterrupt):
            subprocess.run(manage("runserver", "--noreload", f"127.0.0.1:{ns.port}"), check=False)
    else:
        print("To browse jobs, queues and cron schedules in the admin (log in as admin / admin):")
        print("   python examples/django_shop/run_demo.py --serve   then open http://127.0.0.1:8000/admin/")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
