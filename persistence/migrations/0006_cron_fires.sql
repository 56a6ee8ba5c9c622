-- Cron ticks claimed by SQLCronGuard: the first worker to insert a
-- (flow, trigger, tick) starts that tick's run; every other one is told no.
CREATE TABLE IF NOT EXISTS {{cron_fires}} (
    flow     text        COLLATE "C" NOT NULL,
    trigger  text        COLLATE "C" NOT NULL,
    tick     timestamptz NOT NULL,
    fired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (flow, trigger, tick)
);
