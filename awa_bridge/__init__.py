"""awa_bridge: Awa's job model for Python, on the connection you already have.

Enqueue jobs inside the application's own transaction on asyncpg, psycopg 3,
SQLAlchemy or Django; the job commits or rolls back with the application's
rows. No framework is imported until a connection of that framework is used.
"""

from .args import canonical_json, derive_kind
from .callbacks import (
    WaitForCallback,
    complete_external,
    complete_external_async,
    fail_external,
    fail_external_async,
    retry_external,
    retry_external_async,
)
from .enqueue import (
    PreparedJob,
    insert_job,
    insert_job_sync,
    insert_many,
    insert_many_sync,
    prepare_job,
    row_to_job,
)
from .errors import (
    AwaError,
    CallbackNotFound,
    CallbackNotWaiting,
    ForeignSchema,
    InvalidState,
    JobNotFound,
    MigrationChecksumMismatch,
    OutcomeUnknown,
    ReceiptConflict,
    ReceiptNotFound,
    ReceiptNotSaved,
    SchemaNotMigrated,
    StaleAttempt,
    UniqueConflict,
    UnsupportedConnection,
    ValidationError,
)
from .migrations import migrate
from .types import InsertManyResult, Job, JobState
from .unique import UniqueOpts, unique_key

__all__ = [
    "AwaError",
    "CallbackNotFound",
    "CallbackNotWaiting",
    "ForeignSchema",
    "InsertManyResult",
    "InvalidState",
    "Job",
    "JobNotFound",
    "JobState",
    "MigrationChecksumMismatch",
    "OutcomeUnknown",
    "PreparedJob",
    "ReceiptConflict",
    "ReceiptNotFound",
    "ReceiptNotSaved",
    "SchemaNotMigrated",
    "StaleAttempt",
    "UniqueConflict",
    "UniqueOpts",
    "UnsupportedConnection",
    "ValidationError",
    "WaitForCallback",
    "canonical_json",
    "complete_external",
    "complete_external_async",
    "derive_kind",
    "fail_external",
    "fail_external_async",
    "insert_job",
    "insert_job_sync",
    "insert_many",
    "insert_many_sync",
    "migrate",
    "prepare_job",
    "retry_external",
    "retry_external_async",
    "row_to_job",
    "unique_key",
]
