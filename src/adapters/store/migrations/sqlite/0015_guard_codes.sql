-- The fraud guard counts codes, not verifications (issue 45): one row per code sent to a
-- number it looks at (a start's, a resend's, a voice call's), one per caller-supplied key
-- of each code, and the keys that approved a code (trusted keys pass a range hold).
-- The rows of guard_starts and guard_keys become one code each; both tables go.
CREATE TABLE guard_codes (
    -- the client id of the send that carried the code
    send_id         INTEGER PRIMARY KEY,
    verification_id INTEGER NOT NULL,
    -- the number's first MSGW_VERIFY_GUARD_PREFIX_DIGITS digits
    range_prefix    TEXT    NOT NULL,
    -- its ITU E.164 calling code, or 'unassigned'
    calling_code    TEXT    NOT NULL,
    sent_at_ms      INTEGER NOT NULL,
    -- its verification was approved
    approved        BOOLEAN NOT NULL DEFAULT FALSE,
    -- to a safe prefix: counted by key limits and budgets, never judged by conversion
    exempt          BOOLEAN NOT NULL DEFAULT FALSE
);
-- Each start reads its range's and its calling code's figures over the window: these
-- indexes cover those reads (and the budget's count), so no row is fetched for them.
CREATE INDEX guard_codes_range
    ON guard_codes (range_prefix, sent_at_ms, approved, exempt, verification_id, send_id);
CREATE INDEX guard_codes_country
    ON guard_codes (calling_code, sent_at_ms, approved, exempt, verification_id, send_id);
CREATE INDEX guard_codes_verification ON guard_codes (verification_id);
CREATE INDEX guard_codes_age ON guard_codes (sent_at_ms);

CREATE TABLE guard_code_keys (
    send_id         INTEGER NOT NULL,
    verification_id INTEGER NOT NULL,
    -- the key's name (ip, user): not personal; its limit is looked up by it on a resend
    key_name        TEXT    NOT NULL,
    -- HMAC-SHA256 of the key's name and value under a key derived from MSGW_VERIFY_SECRET
    key_mac         BLOB    NOT NULL,
    sent_at_ms      INTEGER NOT NULL,
    PRIMARY KEY (send_id, key_mac)
);
CREATE INDEX guard_code_keys_mac ON guard_code_keys (key_mac, sent_at_ms);
CREATE INDEX guard_code_keys_verification ON guard_code_keys (verification_id);
CREATE INDEX guard_code_keys_age ON guard_code_keys (sent_at_ms);

CREATE TABLE guard_trusted_keys (
    key_mac         BLOB    PRIMARY KEY,
    -- its latest approved code (MSGW_VERIFY_TRUSTED_KEY_WINDOW counts from it)
    approved_at_ms  INTEGER NOT NULL
);
CREATE INDEX guard_trusted_keys_age ON guard_trusted_keys (approved_at_ms);

INSERT INTO guard_codes
    (send_id, verification_id, range_prefix, calling_code, sent_at_ms, approved)
    SELECT verification_id, verification_id, range_prefix, calling_code, started_at_ms, approved
    FROM guard_starts;
INSERT INTO guard_code_keys (send_id, verification_id, key_name, key_mac, sent_at_ms)
    SELECT verification_id, verification_id, '', key_mac, started_at_ms FROM guard_keys;
DROP TABLE guard_keys;
DROP TABLE guard_starts;
