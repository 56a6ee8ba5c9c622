-- The schema registry. Ids come from a counter row (a row lock serialises
-- writers; MAX(id) + 1 would hand two of them the same id), and the unique
-- index on (subject, fingerprint) makes the same definition the same id.
CREATE TABLE {{schemas}} (
    id            bigint      PRIMARY KEY,
    subject       text        NOT NULL,
    format        text        NOT NULL,
    definition    bytea       NOT NULL,
    fingerprint   text        NOT NULL,
    version       integer     NOT NULL,
    registered_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (subject, fingerprint),
    UNIQUE (subject, version)
);
CREATE TABLE {{schema_counter}} (
    name  text   PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO {{schema_counter}} (name, value) VALUES ('schema_id', 0);
