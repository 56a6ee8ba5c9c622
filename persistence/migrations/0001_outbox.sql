-- The outbox: records written in the caller's transaction, relayed in id
-- order. A body that is not valid UTF-8 text is stored base64.
CREATE TABLE {{outbox}} (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    exchange      text        NOT NULL,
    routing_key   text        NOT NULL,
    message_id    text        NOT NULL,
    envelope      text        NOT NULL,
    body          text        NOT NULL,
    body_encoding text        NOT NULL CHECK (body_encoding IN ('utf8', 'base64')),
    attempts      integer     NOT NULL DEFAULT 0,
    last_error    text,
    lease_owner   text,
    lease_until   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now()
);
-- Leased rows are the few in flight; the claim looks for the first of them.
CREATE INDEX {{outbox_leased_idx}} ON {{outbox}} (id) WHERE lease_until IS NOT NULL;
