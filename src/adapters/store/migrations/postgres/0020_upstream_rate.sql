-- The deployment's rate toward the gateway (MSGW_UPSTREAM_RATE), shared by every
-- replica: one row holding the rate's window (core's RateWindow, as JSON; empty: a
-- fresh window). Replicas take their grants from it one short transaction at a time.
CREATE TABLE upstream_rate (
    id SMALLINT PRIMARY KEY CHECK (id = 1),
    state BYTEA NOT NULL
);
INSERT INTO upstream_rate (id, state) VALUES (1, '') ON CONFLICT DO NOTHING;
