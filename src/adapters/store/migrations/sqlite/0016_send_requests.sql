-- A verification's send id stays tied to its request (fix 45): the keyed fingerprint of
-- the StartVerification that claimed it (HMAC under a key derived from
-- MSGW_VERIFY_SECRET; NULL for sends claimed before this version). A retry with the id
-- and another request is refused ALREADY_EXISTS, even after the gateway refused the send.
ALTER TABLE verification_sends ADD COLUMN request_mac BLOB;
