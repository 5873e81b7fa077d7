"""The application's own tables, on the application's own metadata.

``Base.metadata`` holds only ``orders`` and ``stock``: ``create_all()`` on it
never creates or drops anything in the ``awa`` schema (those tables belong to
awa's migrations and are mapped on ``awa_sqlalchemy.AwaBase``).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, CheckConstraint, DateTime, Text, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    # Fetch the server defaults (status, created_at) with the INSERT's RETURNING at flush time.
    __mapper_args__ = {"eager_defaults": True}

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(Text)
    item: Mapped[str] = mapped_column(Text)
    quantity: Mapped[int]
    #: pending until the confirmation job has run, then confirmed.
    status: Mapped[str] = mapped_column(Text, server_default="pending")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    confirmed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    #: The confirmation job's id. Not a foreign key: finished jobs are deleted
    #: after their retention period, and the order outlives them.
    confirmation_job_id: Mapped[int | None] = mapped_column(BigInteger)


class Stock(Base):
    __tablename__ = "stock"
    __table_args__ = (CheckConstraint("available >= 0", name="stock_available_not_negative"),)

    item: Mapped[str] = mapped_column(Text, primary_key=True)
    available: Mapped[int]


#: What a fresh database starts with.
INITIAL_STOCK = {"book": 100, "lamp": 5, "chair": 2}
