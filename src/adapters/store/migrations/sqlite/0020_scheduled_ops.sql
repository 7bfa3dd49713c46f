-- Scheduled sends' requests in the form msgw's core writes and reads
-- (src/core/schedule/kept/), one row per scheduled message that has not left, as in
-- `scheduled`. Requests an earlier version kept in `scheduled` (the gRPC layer's
-- encoding) are moved here by this version, as it starts and while it runs; earlier
-- versions never read this table, so while replicas of two versions share the store no
-- replica takes a request it cannot read.
CREATE TABLE scheduled_ops (
    client_id     INTEGER PRIMARY KEY,
    send_at_ms    INTEGER NOT NULL,
    -- when a replica may take it next: send_at, then the end of a taker's lease
    due_ms        INTEGER NOT NULL,
    -- the validated operation, in core's form
    payload       BLOB NOT NULL,
    caller        TEXT,
    tries         INTEGER NOT NULL DEFAULT 0,
    created_at_ms INTEGER NOT NULL
);
CREATE INDEX scheduled_ops_due ON scheduled_ops (due_ms);
