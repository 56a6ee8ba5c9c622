-- Finding runs at scale (runs list --where/--key/--id-prefix, the
-- dashboard's search box) and counting them (its totals, charts and failed
-- groups, journal.Aggregator).
--
-- input_json is the run's input as jsonb when it is JSON that jsonb takes
-- (the journal writes it beside input, which stays the bytes as recorded);
-- NULL for any other input, which no payload condition then matches.
-- business_key is what the flow's dsl.Key gave on the input ('' for none).
ALTER TABLE {{runs}} ADD COLUMN IF NOT EXISTS input_json jsonb;
ALTER TABLE {{runs}} ADD COLUMN IF NOT EXISTS business_key text COLLATE "C" NOT NULL DEFAULT '';
-- The runs recorded before: their input as jsonb where it is JSON. One
-- UPDATE rewriting each row that has an input (about 20 s and twice the
-- table's size in new row versions for 1,000,000 runs, under the
-- migration's lock: the workers' journal writes wait for it); a row whose
-- input is not JSON keeps input_json NULL.
CREATE OR REPLACE FUNCTION pg_temp.acemq_try_jsonb(b bytea) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    RETURN convert_from(b, 'UTF8')::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END $$;
UPDATE {{runs}} SET input_json = pg_temp.acemq_try_jsonb(input) WHERE input IS NOT NULL AND input_json IS NULL;
-- Payload conditions (input_json @@ jsonpath): the keys and values of
-- every input, hashed.
CREATE INDEX IF NOT EXISTS {{runs_input_idx}} ON {{runs}} USING gin (input_json jsonb_path_ops);
-- Runs by business key, newest first (runs list --key): only runs that
-- have one.
CREATE INDEX IF NOT EXISTS {{runs_key_idx}} ON {{runs}} (business_key, started_at DESC, run_id DESC) WHERE business_key <> '';
-- Failed runs by when they failed, with what their groups and charts
-- count (flow, step, error, and the times the key is of, without which
-- PostgreSQL reads the table): read from the index alone, a few percent of
-- the runs.
CREATE INDEX IF NOT EXISTS {{runs_failed_idx}} ON {{runs}} (status, (coalesce(ended_at, updated_at)))
    INCLUDE (flow, step, error, ended_at, updated_at) WHERE status IN ('failed', 'compensating', 'compensated', 'unresolved');
