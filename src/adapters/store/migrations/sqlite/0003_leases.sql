-- Shared work (retention, the balance refresh) runs on one replica at a time: the
-- one holding its lease until `until_ms`.
CREATE TABLE leases (
    name     TEXT    PRIMARY KEY,
    holder   TEXT    NOT NULL,
    until_ms INTEGER NOT NULL
);
