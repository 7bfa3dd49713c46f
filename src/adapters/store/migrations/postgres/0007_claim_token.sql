-- A random token per claim as inserted: when the connection drops after the insert
-- committed but before its answer arrived, the retry recognises its own claims by it
-- instead of waiting on them as if another call held them.
ALTER TABLE claims ADD COLUMN claim_token BIGINT;
