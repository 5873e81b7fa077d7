-- v002: receipts (DESIGN.md section 8), our own bookkeeping inside awa.
--
-- One row per operation key (tenant + stable business key), written in the
-- caller's transaction together with the business effect. `outcome` is NULL
-- while the effect is in progress: inside one transaction nobody else ever
-- sees that; a committed NULL outcome means an earlier attempt started an
-- external effect and never recorded how it ended (reconcile, never retry
-- blindly).

CREATE TABLE awa.receipts (
    tenant              text        NOT NULL,
    operation_key       text        NOT NULL,
    payload_fingerprint bytea       NOT NULL,
    outcome             jsonb,
    created_at          timestamptz NOT NULL DEFAULT now(),
    recorded_at         timestamptz,

    CONSTRAINT receipts_pkey PRIMARY KEY (tenant, operation_key),
    CONSTRAINT receipts_tenant_length      CHECK (char_length(tenant) BETWEEN 1 AND 200),
    CONSTRAINT receipts_key_length         CHECK (char_length(operation_key) BETWEEN 1 AND 1000),
    CONSTRAINT receipts_fingerprint_length CHECK (octet_length(payload_fingerprint) = 32),
    CONSTRAINT receipts_recorded_pair      CHECK ((outcome IS NULL) = (recorded_at IS NULL))
);

-- Retention: prune recorded receipts by age.
CREATE INDEX receipts_created_idx ON awa.receipts (created_at) WHERE recorded_at IS NOT NULL;
