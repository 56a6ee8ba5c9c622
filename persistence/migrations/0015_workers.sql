-- The workers' reports of themselves (journal.WorkerStore): a row per
-- worker, its latest heartbeat's report in report (what it serves, its
-- readiness, what its handlers hold, its ladder's lateness), renewed every
-- heartbeat interval, deleted when the worker stops cleanly, and pruned
-- once a worker that died has not reported for long. A handful of rows:
-- no index but the key.
CREATE TABLE IF NOT EXISTS {{workers}} (
    id         text COLLATE "C" PRIMARY KEY,
    host       text        NOT NULL,
    pid        integer     NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at    timestamptz NOT NULL,
    report     jsonb       NOT NULL
);
