-- Every keyword reply msgw applied, whether it changed the list or not (fix 45): a reply
-- is applied once, so a webhook the gateway repeats later cannot re-apply an old START
-- (or STOP) at its new arrival time. Kept as long as the event log keeps events.
CREATE TABLE seen_replies (
    -- the reply's key: its message, its place among the replies, its time and its text
    dedup_key   TEXT   PRIMARY KEY,
    seen_at_ms  BIGINT NOT NULL
);
CREATE INDEX seen_replies_age ON seen_replies (seen_at_ms);
