-- Runs with a due time (waiting on the ladder, or failed and held for a
-- replay) in some statuses, soonest due first: SQLJournal.Runs with
-- journal.SoonestDue, which `schedule list` asks, walks one range of these
-- per status instead of sorting every waiting run. Partial: most runs have
-- no due time, and their updates from step to step never touch these.
CREATE INDEX IF NOT EXISTS {{runs_due_idx}} ON {{runs}} (status, due_at, run_id) WHERE due_at IS NOT NULL;
-- The same, of one flow (`schedule list --flow`).
CREATE INDEX IF NOT EXISTS {{runs_flow_due_idx}} ON {{runs}} (flow, status, due_at, run_id) WHERE due_at IS NOT NULL;
