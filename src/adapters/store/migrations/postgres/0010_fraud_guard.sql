-- The fraud guard's counters (MSGW_VERIFY_FRAUD_GUARD): one row per verification it
-- counted, one per caller-supplied rate-limit key of it (an HMAC, never the value),
-- and one per range it held. Rows older than the guard's longest window are pruned.
CREATE TABLE guard_starts (
    verification_id BIGINT  PRIMARY KEY,
    -- the number's first MSGW_VERIFY_GUARD_PREFIX_DIGITS digits
    range_prefix    TEXT    NOT NULL,
    -- its ITU E.164 calling code, or 'unassigned'
    calling_code    TEXT    NOT NULL,
    started_at_ms   BIGINT  NOT NULL,
    approved        BOOLEAN NOT NULL DEFAULT FALSE,
    -- codes sent to it: the first and its resends
    sends           BIGINT   NOT NULL DEFAULT 1
);
CREATE INDEX guard_starts_range ON guard_starts (range_prefix, started_at_ms);
CREATE INDEX guard_starts_country ON guard_starts (calling_code, started_at_ms);
CREATE INDEX guard_starts_age ON guard_starts (started_at_ms);

CREATE TABLE guard_keys (
    verification_id BIGINT  NOT NULL,
    -- HMAC-SHA256 of the key's name and value under a key derived from MSGW_VERIFY_SECRET
    key_mac         BYTEA   NOT NULL,
    started_at_ms   BIGINT  NOT NULL,
    PRIMARY KEY (verification_id, key_mac)
);
CREATE INDEX guard_keys_mac ON guard_keys (key_mac, started_at_ms);
CREATE INDEX guard_keys_age ON guard_keys (started_at_ms);

CREATE TABLE guard_holds (
    range_prefix    TEXT    PRIMARY KEY,
    held_at_ms      BIGINT  NOT NULL,
    -- the hold ends then (a release sets it to the release's time)
    until_ms        BIGINT  NOT NULL,
    -- placed in shadow mode: reported, never enforced
    shadow          BOOLEAN NOT NULL,
    unconverted     BIGINT  NOT NULL,
    approved        BIGINT  NOT NULL,
    -- an operator's latest release: the range's figures count from then on
    released_at_ms  BIGINT
);
