-- The fraud guard judges each region of a calling code shared by several (+1: US, JM,
-- CA, ...) like the calling code (fix 45, finding 3): a code's region, as the guard
-- names it (`1/JM`: calling code, `/`, libphonenumber's region code), or NULL when its
-- calling code has one region or the metadata cannot tell. Codes counted before this
-- have none: a region is judged on the codes counted from now on.
ALTER TABLE guard_codes ADD COLUMN region TEXT;
-- Covers the region's figures over the window (as guard_codes_country does a code's).
CREATE INDEX guard_codes_region
    ON guard_codes (region, sent_at_ms, approved, exempt, verification_id, send_id)
    WHERE region IS NOT NULL;
