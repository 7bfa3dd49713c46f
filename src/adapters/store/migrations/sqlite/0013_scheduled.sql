-- Scheduled sends: a claim made when a send is scheduled stays `scheduled` (with its
-- send_at) until the message leaves (taken over like any claim) or is cancelled
-- (`canceled`, final). The request itself waits in `scheduled` until it has left.
ALTER TABLE claims ADD COLUMN send_at_ms INTEGER;

CREATE TABLE scheduled (
    client_id     INTEGER PRIMARY KEY,
    send_at_ms    INTEGER NOT NULL,
    -- when a replica may take it next: send_at, then the end of a taker's lease
    due_ms        INTEGER NOT NULL,
    -- the validated request, as the gRPC layer encoded it
    payload       BLOB    NOT NULL,
    caller        TEXT,
    tries         INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX scheduled_due ON scheduled (due_ms);
