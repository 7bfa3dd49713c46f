-- The built-in sandbox gateway's account (balance, messages and their statuses,
-- templates, id counters, deliveries under way), saved as one JSON document so that
-- a restart of msgw on its sandbox changes nothing a user can see.
CREATE TABLE sandbox_state (
    account     TEXT    PRIMARY KEY,
    state       TEXT    NOT NULL,
    saved_at_ms BIGINT  NOT NULL
);
