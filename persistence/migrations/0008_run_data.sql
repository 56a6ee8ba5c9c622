-- Data a run needs later and that is too large to travel in its messages'
-- headers (journal.DataStore): what a completed step returned, for its
-- compensation. It goes with its run (SQLJournal.PurgeEnded).
CREATE TABLE IF NOT EXISTS {{run_data}} (
    run_id text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    data   bytea NOT NULL,
    PRIMARY KEY (run_id, key)
);
