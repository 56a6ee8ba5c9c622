-- The input of each step of a run's own route (journal.Event.StepInput):
-- the payload the step ran on, with what else the engine needs to send it
-- that message again (input_state), which a replay from that step
-- (engine.ReplayFrom) sends. input_size is their size in bytes; an input
-- over journal.MaxStepInput (64 KiB) is not kept (input NULL, its size
-- still recorded). They go with their run's events (PurgeEnded).
ALTER TABLE {{run_events}} ADD COLUMN IF NOT EXISTS input bytea;
ALTER TABLE {{run_events}} ADD COLUMN IF NOT EXISTS input_state text NOT NULL DEFAULT '';
ALTER TABLE {{run_events}} ADD COLUMN IF NOT EXISTS input_size integer NOT NULL DEFAULT 0;
