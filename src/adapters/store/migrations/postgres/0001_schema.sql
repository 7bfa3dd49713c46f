-- msgw's store on PostgreSQL: the same tables as on SQLite, shared by every replica.

-- Messages msgw sent, tracked until their status is final (reconcile polls them).
CREATE TABLE messages (
    client_id     BIGINT  PRIMARY KEY,
    msg_id        TEXT    NOT NULL,
    channel       TEXT    NOT NULL,
    sent_at_ms    BIGINT  NOT NULL,
    lifetime_s    BIGINT  NOT NULL,
    last_status   TEXT,
    is_final      BOOLEAN NOT NULL DEFAULT FALSE,
    next_poll_ms  BIGINT,
    polls         BIGINT  NOT NULL DEFAULT 0
);
CREATE INDEX messages_msg_id ON messages (msg_id);
CREATE INDEX messages_due ON messages (next_poll_ms) WHERE NOT is_final AND next_poll_ms IS NOT NULL;

-- The event log: every status msgw learned, in cursor order. Cursors are handed out
-- by appends holding the lock on `event_head` until they commit, so they commit in
-- cursor order (a sequence would not: a later number can commit first).
CREATE TABLE events (
    cursor         BIGINT  PRIMARY KEY,
    dedup_key      TEXT    NOT NULL UNIQUE,
    client_id      BIGINT  NOT NULL,
    msg_id         TEXT,
    channel        TEXT,
    status         TEXT,
    success        BOOLEAN NOT NULL,
    error          TEXT,
    updated        TEXT,
    reply          TEXT,
    duration_s     DOUBLE PRECISION,
    request_id     TEXT,
    replies        TEXT    NOT NULL DEFAULT '[]',
    received_at_ms BIGINT  NOT NULL,
    source         TEXT    NOT NULL,
    is_final       BOOLEAN NOT NULL
);
CREATE INDEX events_received ON events (received_at_ms);

-- The newest cursor ever handed out (kept when its event is pruned).
CREATE TABLE event_head (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    cursor    BIGINT  NOT NULL
);
INSERT INTO event_head (singleton, cursor) VALUES (TRUE, 0);

-- Every stored status updates its message: a final one stops reconcile polling.
CREATE FUNCTION msgw_track_message() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE messages
       SET last_status = NEW.status,
           is_final = is_final OR NEW.is_final,
           next_poll_ms = CASE WHEN NEW.is_final THEN NULL ELSE next_poll_ms END
     WHERE client_id = NEW.client_id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_track_message AFTER INSERT ON events
    FOR EACH ROW WHEN (NEW.client_id <> 0) EXECUTE FUNCTION msgw_track_message();

-- Idempotency claims: one row per client id of a keyed operation. The primary key
-- makes the claim atomic across replicas; `attempt` is the generation a take-over or
-- an outcome must match, so a late writer never overwrites a newer one.
CREATE TABLE claims (
    client_id     BIGINT  PRIMARY KEY,
    fingerprint   BYTEA   NOT NULL,
    attempt       BIGINT  NOT NULL,
    -- in_flight | accepted | released | unknown
    state         TEXT    NOT NULL,
    claimed_at_ms BIGINT  NOT NULL,
    settled_at_ms BIGINT,
    msg_id        TEXT,
    parts         BIGINT,
    payload       TEXT,
    recovered     BOOLEAN NOT NULL DEFAULT FALSE,
    reason        TEXT
);
CREATE INDEX claims_age ON claims (claimed_at_ms);

-- Shared work (retention, the balance refresh) runs on one replica at a time: the
-- one holding its lease until `until_ms`.
CREATE TABLE leases (
    name     TEXT   PRIMARY KEY,
    holder   TEXT   NOT NULL,
    until_ms BIGINT NOT NULL
);
