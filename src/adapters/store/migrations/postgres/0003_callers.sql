-- Who sent each message: the caller that claimed its id (NULL: msgw ran without
-- caller authentication), copied onto each of its events when they are appended,
-- so a caller streams the events of its own messages only.
ALTER TABLE claims ADD COLUMN caller TEXT;
ALTER TABLE events ADD COLUMN caller TEXT;
