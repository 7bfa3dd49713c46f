-- The built-in sandbox gateway's messages, one row per client id (the message, its
-- status and its delivery under way, as JSON), apart from its account document in
-- sandbox_state: a send's save, which its answer waits for, writes only the rows it
-- changed, not the whole account.
CREATE TABLE sandbox_messages (
    account TEXT   NOT NULL,
    id      BIGINT NOT NULL,
    record  TEXT   NOT NULL,
    PRIMARY KEY (account, id)
);
