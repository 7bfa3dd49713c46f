-- Idempotency claims: one row per client id of a keyed operation (every send and
-- voice OTP). The primary key makes the claim atomic; `attempt` is the generation a
-- take-over or an outcome must match, so a late writer never overwrites a newer one.
CREATE TABLE claims (
    client_id     INTEGER PRIMARY KEY,
    fingerprint   BLOB    NOT NULL,
    attempt       INTEGER NOT NULL,
    -- in_flight | accepted | released | unknown
    state         TEXT    NOT NULL,
    claimed_at_ms INTEGER NOT NULL,
    settled_at_ms INTEGER,
    -- accepted: the gateway's answer
    msg_id        TEXT,
    parts         INTEGER,
    payload       TEXT,
    recovered     INTEGER NOT NULL DEFAULT 0,
    -- released: why nothing was sent
    reason        TEXT
);
CREATE INDEX claims_age ON claims (claimed_at_ms);
