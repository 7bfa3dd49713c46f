-- Messages msgw sent, tracked until their status is final (reconcile polls them).
CREATE TABLE messages (
    client_id     INTEGER PRIMARY KEY,
    msg_id        TEXT    NOT NULL,
    channel       TEXT    NOT NULL,
    sent_at_ms    INTEGER NOT NULL,
    lifetime_s    INTEGER NOT NULL,
    last_status   TEXT,
    is_final      INTEGER NOT NULL DEFAULT 0,
    next_poll_ms  INTEGER,
    polls         INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX messages_msg_id ON messages (msg_id);
CREATE INDEX messages_due ON messages (next_poll_ms) WHERE is_final = 0 AND next_poll_ms IS NOT NULL;

-- The event log: every status msgw learned, in cursor order.
CREATE TABLE events (
    cursor         INTEGER PRIMARY KEY AUTOINCREMENT,
    dedup_key      TEXT    NOT NULL UNIQUE,
    client_id      INTEGER NOT NULL,
    msg_id         TEXT,
    channel        TEXT,
    status         TEXT,
    success        INTEGER NOT NULL,
    error          TEXT,
    updated        TEXT,
    reply          TEXT,
    duration_s     REAL,
    request_id     TEXT,
    replies        TEXT    NOT NULL DEFAULT '[]',
    received_at_ms INTEGER NOT NULL,
    source         TEXT    NOT NULL,
    is_final       INTEGER NOT NULL
);
CREATE INDEX events_received ON events (received_at_ms);

-- Every stored status updates its message: a final one stops reconcile polling.
CREATE TRIGGER events_track_message AFTER INSERT ON events WHEN NEW.client_id != 0
BEGIN
    UPDATE messages
       SET last_status = NEW.status,
           is_final = MAX(is_final, NEW.is_final),
           next_poll_ms = CASE WHEN NEW.is_final THEN NULL ELSE next_poll_ms END
     WHERE client_id = NEW.client_id;
END;
