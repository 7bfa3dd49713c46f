-- The `status` lookups of a claim whose outcome is unknown: how many in a row left it
-- unknown, and the earliest the next may run (NULL: no lookup has, so one may run now).
-- Stored with the claim, so that across callers and replicas at most one lookup of a
-- claim runs at a time and retries inside the backoff make no gateway call.
ALTER TABLE claims ADD COLUMN lookups INTEGER NOT NULL DEFAULT 0;
ALTER TABLE claims ADD COLUMN next_lookup_ms INTEGER;
