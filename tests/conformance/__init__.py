"""One conformance suite: every operation family on every supported connection type.

Each module is one family; each test takes the shared ``handle`` fixture
(tests/conftest.py), parametrized over every connection type of
tests/drivers.py, and calls the family's functions by their documented names:
the sync name on a sync connection, the awaited ``*_async`` twin on an async
one (``Handle.call``). Every test checks the same observable results on every
type: what the call returns, the rows an independent connection sees (only
after the caller commits, none after a rollback), and for bad input an error
naming the field, nothing written and the caller's transaction still usable.

===================  ==========================================================  ==========================
family               module                                                      async connections
===================  ==========================================================  ==========================
enqueue              tests/test_conformance.py                                   ``await insert_job(...)``
admin operations     test_admin.py (single, by unique key, bulk, queues, stats)  ``*_async`` / bulk_async
receipts             test_receipts.py (receipt, record_effect, inspection)       ``async with`` / ``*_async``
callbacks            test_callbacks.py (complete / fail / retry_external)        ``*_async``
cron                 test_cron.py (upsert / prune, operations)                   upsert / prune only
migrate_connection   test_migrate.py                                             ``conn.run_sync(...)``
worker statements    test_worker_sql.py (claim, complete, finish, heartbeat...)  the driver adapter
===================  ==========================================================  ==========================

Where a family documents a connection type as unsupported (cron operations
and receipt inspection take sync connections; ``migrate_connection`` takes a
psycopg or SQLAlchemy ``Connection``) the test asserts the clear error it
documents instead of skipping.
"""
