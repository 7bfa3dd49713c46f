-- Verifications (one-time codes): one row per verification. The code is kept only as
-- an HMAC and sealed under MSGW_VERIFY_SECRET, a key that is never in the store.
-- `caller` is '' for calls without caller authentication, so the unique index holds
-- for them too (NULLs would never conflict).
CREATE TABLE verifications (
    -- the client id of its first send
    id              BIGINT  PRIMARY KEY,
    caller          TEXT    NOT NULL,
    phone           BIGINT  NOT NULL,
    -- pending | approved | expired | canceled | failed
    status          TEXT    NOT NULL,
    -- gateway channel names of the latest send, comma-separated, in order
    channels        TEXT    NOT NULL,
    last_send_id    BIGINT  NOT NULL,
    -- NULL while a voice call that picks the code is under way
    code_mac        BYTEA,
    sealed_code     BYTEA,
    seal_nonce      BYTEA,
    checks_left     BIGINT  NOT NULL,
    sends_left      BIGINT  NOT NULL,
    created_at_ms   BIGINT  NOT NULL,
    expires_at_ms   BIGINT  NOT NULL,
    last_send_at_ms BIGINT  NOT NULL,
    updated_at_ms   BIGINT  NOT NULL
);
-- At most one pending verification per caller and number: a second start is a resend.
CREATE UNIQUE INDEX verifications_pending ON verifications (caller, phone) WHERE status = 'pending';
-- New verifications per number in the last hour (MSGW_VERIFY_PHONE_LIMIT).
CREATE INDEX verifications_phone ON verifications (phone, created_at_ms);

-- Every send of a verification by its client id: a retry of StartVerification with the
-- same id finds its verification here instead of starting another one.
CREATE TABLE verification_sends (
    client_id       BIGINT  PRIMARY KEY,
    verification_id BIGINT  NOT NULL,
    -- the gateway accepted it (a retry answers without asking the dispatcher)
    sent            BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX verification_sends_of ON verification_sends (verification_id);
