-- The replay a run's input is of: a run started again (engine.StartAgain)
-- takes the input of its later start, and keeps it whichever order the
-- starts' batches arrive in.
ALTER TABLE {{runs}} ADD COLUMN IF NOT EXISTS input_replays integer NOT NULL DEFAULT 0;
