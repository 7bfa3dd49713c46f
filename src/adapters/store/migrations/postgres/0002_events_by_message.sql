-- A message's events by client id (GetMessageStatus with wait_for_final).
CREATE INDEX events_client ON events (client_id, cursor);
