-- The run journal (SQLJournal): one row per run, kept up to date by the
-- events of its timeline, and the timeline, one row per (run, key).
-- IF NOT EXISTS: several Tables sets that leave Runs and RunEvents at their
-- defaults (one per service's stores, say) share one journal, and each set
-- runs its own migrations. Ids and keys sort by bytes ("C"), as Go does.
CREATE TABLE IF NOT EXISTS {{runs}} (
    run_id      text COLLATE "C" PRIMARY KEY,
    flow        text        NOT NULL,
    status      text        NOT NULL,
    step        text        NOT NULL,
    input       bytea,
    error       text        NOT NULL,
    started_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    due_at      timestamptz,
    dead_letter text        NOT NULL,
    replays     integer     NOT NULL,
    seq         bigint      NOT NULL
) WITH (fillfactor = 80); -- room for the step-to-step updates to stay on their page (HOT)
-- Runs of a flow in some statuses, newest first (Runs with a Flow).
CREATE INDEX IF NOT EXISTS {{runs_flow_idx}} ON {{runs}} (flow, status, started_at DESC, run_id DESC);
-- Runs in some statuses, newest first (Runs without a Flow).
CREATE INDEX IF NOT EXISTS {{runs_status_idx}} ON {{runs}} (status, started_at DESC, run_id DESC);
-- Runs with an error, newest first (ErrorContains): few among all runs.
CREATE INDEX IF NOT EXISTS {{runs_error_idx}} ON {{runs}} (started_at DESC, run_id DESC) WHERE error <> '';
-- Ended runs, oldest first (PurgeEnded).
CREATE INDEX IF NOT EXISTS {{runs_ended_idx}} ON {{runs}} (ended_at) WHERE ended_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS {{run_events}} (
    run_id      text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    seq         bigint      NOT NULL,
    kind        text        NOT NULL,
    step        text        NOT NULL,
    attempt     integer     NOT NULL,
    outcome     text        NOT NULL,
    started_at  timestamptz NOT NULL,
    ended_at    timestamptz NOT NULL,
    error       text        NOT NULL,
    queue       text        NOT NULL,
    due_at      timestamptz,
    status      text        NOT NULL,
    run_step    text        NOT NULL,
    replays     integer     NOT NULL,
    dead_letter text        NOT NULL,
    PRIMARY KEY (run_id, key)
);
