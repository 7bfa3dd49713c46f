-- The settle window of a claim whose request was cut (upstream timeout, connection
-- error after the body may have left): until this instant the gateway's "not found"
-- means "not yet", never "never sent". Stored with the claim, so every replica
-- honours the window of a request another one cut. NULL: no window.
ALTER TABLE claims ADD COLUMN settle_until_ms INTEGER;
-- Reconcile resolves claims left unknown or in flight once their window is over.
CREATE INDEX claims_unsettled ON claims (claimed_at_ms) WHERE state IN ('in_flight', 'unknown');
