-- The versions of flows workers served (journal.VersionStore): a row per
-- flow and version (its fingerprint), with the steps it had, in their
-- order (their queues are <flow>.<step>, and may still hold runs of it
-- after workers of a newer version took over), and when a worker of it
-- started first and last. A version seen again keeps its steps and
-- first_seen; only last_seen moves.
CREATE TABLE IF NOT EXISTS {{flow_versions}} (
    flow       text COLLATE "C" NOT NULL,
    version    text COLLATE "C" NOT NULL,
    steps      text[]      NOT NULL,
    first_seen timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL,
    PRIMARY KEY (flow, version)
);
-- The version of its flow each run started on ('' for runs started
-- before flows had versions), which runs list --version selects by.
ALTER TABLE {{runs}} ADD COLUMN IF NOT EXISTS version text COLLATE "C" NOT NULL DEFAULT '';
