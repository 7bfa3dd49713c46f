-- Consent by time. Every number's newest opt-out decision: a keyword reply at its own
-- time (its `datetime`, else the report's `updated`, else when msgw received it) or a
-- SuppressionService call at its time; opted out or back in. A decision is written only
-- over an older one (an opt-out wins a tie), by the write's own WHERE, so replies
-- applied in any order, on any replica, end in the newest one's state. `suppressions`
-- keeps the entry of each number whose newest decision is an opt-out (the send path
-- reads only it).
CREATE TABLE consent (
    phone          BIGINT  PRIMARY KEY,
    opted_out      BOOLEAN NOT NULL,
    decided_at_ms  BIGINT  NOT NULL
);

INSERT INTO consent (phone, opted_out, decided_at_ms)
    SELECT phone, TRUE, created_at_ms FROM suppressions;
