-- The queues of deleted lambdas, until a Store Consumer has deleted them
-- from the queue service (which the store's transaction cannot reach). A
-- lambda deployed again under the name keeps its queues: its row goes.
CREATE TABLE retired_queues (
    lambda TEXT PRIMARY KEY
) STRICT;
