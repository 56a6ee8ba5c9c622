-- The limits of steps (journal.LimitStore). A row per key of a step with
-- a ConcurrencyKey: the places taken (held) under the row's lock, which
-- every Acquire and every hand-out takes, the waiters it counts (a hint
-- the hand-out corrects), the limit last asked for, and what the last
-- Acquire decided (took, its RETURNING). A row per holder of a place or
-- waiter for one: w waiting with the message that brings it back (seq
-- orders them), g handed a place whose message is on its way, h holding.
-- A row per key of a rate-limited step with its next free turn, and one
-- per run waiting for its reserved turn (microseconds since the epoch).
CREATE TABLE IF NOT EXISTS {{limits}} (
    flow     text COLLATE "C" NOT NULL,
    step     text COLLATE "C" NOT NULL,
    key      text COLLATE "C" NOT NULL,
    held     integer NOT NULL,
    waiting  integer NOT NULL DEFAULT 0,
    lim      integer NOT NULL,
    took     boolean NOT NULL,
    PRIMARY KEY (flow, step, key)
) WITH (fillfactor = 50); -- every acquire and release updates its key: room for HOT updates
CREATE TABLE IF NOT EXISTS {{limit_slots}} (
    flow       text COLLATE "C" NOT NULL,
    step       text COLLATE "C" NOT NULL,
    holder     text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    run_id     text COLLATE "C" NOT NULL,
    state      "char" NOT NULL,
    seq        bigserial,
    parked     bytea,
    granted_at timestamptz,
    PRIMARY KEY (flow, step, holder)
);
CREATE INDEX IF NOT EXISTS {{limit_slots_waiting_idx}} ON {{limit_slots}} (flow, step, key, seq) WHERE state = 'w';
CREATE INDEX IF NOT EXISTS {{limit_slots_run_idx}} ON {{limit_slots}} (run_id) WHERE state = 'w';
CREATE INDEX IF NOT EXISTS {{limit_slots_granted_idx}} ON {{limit_slots}} (granted_at) WHERE state = 'g';
CREATE TABLE IF NOT EXISTS {{rates}} (
    flow   text COLLATE "C" NOT NULL,
    step   text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    tat_us bigint NOT NULL,
    PRIMARY KEY (flow, step, key)
) WITH (fillfactor = 50);
CREATE TABLE IF NOT EXISTS {{rate_turns}} (
    flow   text COLLATE "C" NOT NULL,
    step   text COLLATE "C" NOT NULL,
    holder text COLLATE "C" NOT NULL,
    at_us  bigint NOT NULL,
    PRIMARY KEY (flow, step, holder)
);
