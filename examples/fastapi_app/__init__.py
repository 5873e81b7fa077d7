"""An order service on FastAPI + SQLAlchemy (asyncpg) whose jobs commit with its rows.

``app.py`` creates an order and enqueues its confirmation job in ONE
``AsyncSession`` transaction; ``worker.py`` runs those jobs; ``python -m
examples.fastapi_app`` starts both (on an embedded PostgreSQL when
``DATABASE_URL`` is unset). See README.md in this folder.
"""
