-- Narrower trust (fix 45): a key is trusted only in the calling code of the number whose
-- verification it started (not keys added by resends), and passes holds only there. Rows
-- of the old table named no calling code: they are dropped (those keys are trusted
-- again by their next approval).
DROP TABLE guard_trusted_keys;
CREATE TABLE guard_trusted_keys (
    key_mac         BLOB   NOT NULL,
    -- the calling code of the number its approved verification went to
    calling_code    TEXT    NOT NULL,
    -- its latest approved code there (MSGW_VERIFY_TRUSTED_KEY_WINDOW counts from it)
    approved_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (key_mac, calling_code)
);
CREATE INDEX guard_trusted_keys_age ON guard_trusted_keys (approved_at_ms);
