-- Idempotency keys: a claim under a lease, or a confirmation held for
-- retention. Keys are bytes, so that no encoding can make one key two.
CREATE TABLE {{idempotency}} (
    key        bytea       PRIMARY KEY,
    state      text        NOT NULL CHECK (state IN ('claimed', 'confirmed')),
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX {{idempotency_expires_idx}} ON {{idempotency}} (expires_at);
