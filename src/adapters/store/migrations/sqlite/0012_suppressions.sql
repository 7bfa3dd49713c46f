-- Opt-outs. The suppression list: numbers no send reaches, one row each. `source` is
-- reply (a STOP reply to a message msgw sent: `client_id` is that message's) or api (a
-- SuppressionService caller: `caller`, NULL without caller authentication).
CREATE TABLE suppressions (
    phone         INTEGER PRIMARY KEY,
    source        TEXT    NOT NULL,
    -- the reply's keyword as written, or the caller's reason
    reason        TEXT    NOT NULL,
    -- 0: none
    client_id     INTEGER NOT NULL DEFAULT 0,
    caller        TEXT,
    created_at_ms INTEGER NOT NULL
);

-- The number each message went to, recorded when the gateway accepts the send: a
-- reply to the message opts out that number. NULL for messages sent before.
ALTER TABLE messages ADD COLUMN phone INTEGER;

-- The event log also holds the list's changes, in the one cursor order: `kind` is
-- status (a delivery status, every row before this migration), opt_out or opt_in; a
-- change's row has its `phone` and `reason`, its `client_id` (the message a reply
-- answered, else 0), `source` (reply or api), `caller` (the caller that made it) and
-- `received_at_ms` (when msgw made it).
ALTER TABLE events ADD COLUMN kind TEXT NOT NULL DEFAULT 'status';
ALTER TABLE events ADD COLUMN phone INTEGER;
ALTER TABLE events ADD COLUMN reason TEXT;

-- Only a status tracks its message (a change's client_id names a message, too).
DROP TRIGGER events_track_message;
CREATE TRIGGER events_track_message AFTER INSERT ON events
    WHEN NEW.client_id != 0 AND NEW.kind = 'status'
BEGIN
    UPDATE messages
       SET last_status = NEW.status,
           is_final = MAX(is_final, NEW.is_final),
           next_poll_ms = CASE WHEN NEW.is_final THEN NULL ELSE next_poll_ms END
     WHERE client_id = NEW.client_id;
END;
