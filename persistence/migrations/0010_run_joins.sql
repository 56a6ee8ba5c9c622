-- The joins of runs that branch (journal.JoinStore): a row per join, its
-- counts updated by every settle under the row's lock (journal.Decide); a
-- row per settled branch with what it returned and the decision its settle
-- made, which a redelivered settle gets again; a row per item of a
-- ForEach. They go with their run (SQLJournal.PurgeEnded).
CREATE TABLE IF NOT EXISTS {{run_joins}} (
    run_id     text COLLATE "C" NOT NULL,
    join_key   text COLLATE "C" NOT NULL,
    total      integer     NOT NULL,
    lim        integer     NOT NULL,
    dispatched integer     NOT NULL,
    arrived    integer     NOT NULL DEFAULT 0,
    stopped    integer     NOT NULL DEFAULT 0,
    failed     boolean     NOT NULL DEFAULT false,
    parent     bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, join_key)
) WITH (fillfactor = 50); -- every settle updates its join: room for the updates to stay on their page (HOT)
CREATE TABLE IF NOT EXISTS {{run_branches}} (
    run_id   text COLLATE "C" NOT NULL,
    join_key text COLLATE "C" NOT NULL,
    branch   integer NOT NULL,
    ok       boolean NOT NULL,
    output   bytea,
    entries  bytea,
    next     integer NOT NULL,
    last     boolean NOT NULL,
    failed   boolean NOT NULL,
    PRIMARY KEY (run_id, join_key, branch)
);
CREATE TABLE IF NOT EXISTS {{run_items}} (
    run_id   text COLLATE "C" NOT NULL,
    join_key text COLLATE "C" NOT NULL,
    idx      integer NOT NULL,
    data     bytea,
    PRIMARY KEY (run_id, join_key, idx)
);
