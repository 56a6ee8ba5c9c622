-- What a completed piece of work produced, kept until it has been passed
-- on (patterns.ResultStore): a follower's next message, sent again by a
-- redelivery instead of running the step twice. NULL once confirmed.
ALTER TABLE {{idempotency}} ADD COLUMN result bytea;
