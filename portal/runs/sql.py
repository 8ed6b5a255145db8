"""The PostgreSQL statements of ``portal.runs``, by name: the checkpointer's (one per load
and one per write), the run queue's (one per claim and one per finish) and the idle
workers' turn to listen.

The tables are the models' default names, and the INSERTs and the claim's RETURNING name
every column by hand (tests/runs/test_checkpointer.py checks all three). Parameters that
land in a SELECT list are cast: the server cannot infer their types there, and a NULL
would otherwise be text.
"""

# -- the checkpointer (portal.runs.checkpointer) --------------------------------------

# The whole history up to the thread's last_seq, in one consistent snapshot, with the
# newest row's fields. A thread with no checkpoint gives one row of NULLs; no thread, none.
LOAD = """
SELECT t.agent, c.seq, c.status, c.next_node, c.messages::text,
       CASE WHEN c.seq = t.last_seq THEN c.meta::text END,
       CASE WHEN c.seq = t.last_seq THEN c.interrupt::text END
FROM portal_thread t LEFT JOIN portal_checkpoint c ON c.thread_id = t.id AND c.seq <= t.last_seq
WHERE t.id = %(thread)s
ORDER BY c.seq
"""

# The compare-and-swap, as `moved`: the thread's row if it was still at the seq the step
# built on and not cancelled, else nothing (another writer moved it on, or a person
# stopped it: a tool call is recorded before it runs, so a refused write is one that never
# runs). A thread's first step (parent_seq=None) creates the row or takes one still at 0,
# in the same statement.
MOVE = """
WITH moved AS (
    UPDATE portal_thread SET last_seq = %(seq)s, status = %(status)s, updated_at = %(now)s
    WHERE id = %(thread)s AND last_seq = %(expected)s AND cancelled_at IS NULL
    RETURNING id, agent
)"""
MOVE_FIRST = """
WITH moved AS (
    INSERT INTO portal_thread (id, agent, status, owner_id, title, created_at, updated_at,
                               last_seq, cancelled_at, cancelled_by_id)
    VALUES (%(thread)s, '', %(status)s, NULL, '', %(now)s, %(now)s, %(seq)s, NULL, NULL)
    ON CONFLICT (id) DO UPDATE SET last_seq = EXCLUDED.last_seq, status = EXCLUDED.status,
                                   updated_at = EXCLUDED.updated_at
    WHERE portal_thread.last_seq = 0 AND portal_thread.cancelled_at IS NULL
    RETURNING id, agent
)"""

# The steps' rows (one JSON array of them, numbered on from the seq the write built on),
# inserted only if `moved` has the thread: a conflict writes nothing and reports 0 steps.
STEP = """, step AS (
    INSERT INTO portal_checkpoint (thread_id, seq, node, status, next_node, messages, meta,
                                   interrupt, interrupt_id, run_id, created_at)
    SELECT moved.id, %(expected)s + s.n, s.node, s.status, s.next_node, s.messages, s.meta,
           s.interrupt, s.interrupt_id, %(run)s::uuid, to_timestamp(s.at)
    FROM moved, ROWS FROM (
             jsonb_to_recordset(%(steps)s::jsonb) AS (node text, status text, next_node text,
                                                    messages jsonb, meta jsonb,
                                                    interrupt jsonb, interrupt_id text,
                                                    at double precision)
         ) WITH ORDINALITY AS s(node, status, next_node, messages, meta, interrupt,
                                interrupt_id, at, n)
    RETURNING seq
)"""

# Keeping the queue equal to the checkpoint, only in the statements of steps that can
# change it (each part costs the server its table's indexes to set up, even when it
# writes no row): pending requests of the thread that the step no longer names leave the
# queue (`stale`), and a pause's request enters it (`entered`) with its outbox row
# (`announced`: portal.notify.outbox fills in the payload when it fans the event out), waking the
# notifiers at commit (`rang`: counted as `entered`, so that it runs).
QUEUE = """, stale AS (
    UPDATE portal_interrupt SET status = %(resolved)s, resolved_at = %(now)s
    WHERE thread_id = %(thread)s AND status = %(pending)s AND id <> %(pending_key)s
      AND EXISTS (SELECT 1 FROM moved)
    RETURNING id, reason
), entered AS (
    INSERT INTO portal_interrupt (id, thread_id, agent, key, node, value, message, reason,
                                  response_schema, tool_call_id, tool, summary, status,
                                  created_at,
                                  expires_at, claimed_by_id, claimed_at, resolved_at,
                                  decided, checkpoint_seq, approvals_required, routed_by_id)
    SELECT %(pending_key)s::varchar, id, agent, %(key)s::varchar, %(request_node)s::varchar,
           %(value)s::jsonb, %(message)s::text, %(reason)s::varchar, %(schema)s::jsonb,
           %(tool_call_id)s::varchar, %(tool)s::varchar, %(summary)s::varchar,
           %(pending)s::varchar,
           %(now)s::timestamptz,
           %(expires_at)s::timestamptz, NULL, NULL, NULL, false, %(seq)s::integer, NULL, NULL
    FROM moved WHERE %(pending_key)s::varchar <> ''
    ON CONFLICT (id) DO NOTHING
    RETURNING id, thread_id, agent
), announced AS (
    INSERT INTO portal_notification (id, kind, payload, agent, reason, interrupt_id, thread_id,
                                     created_at, dispatched_at)
    SELECT gen_random_uuid(), %(created_kind)s::varchar, '{}'::jsonb, agent,
           %(reason)s::varchar, id, thread_id, %(now)s::timestamptz, NULL
    FROM entered
), rang AS (
    SELECT pg_notify(%(wake_channel)s, %(wake_key)s) FROM entered
)
SELECT (SELECT count(*) FROM step), (SELECT agent FROM moved),
       (SELECT coalesce(json_agg(json_build_array(id, reason)), '[]')::text FROM stale),
       (SELECT count(*) FROM rang)
"""
NO_QUEUE = " SELECT (SELECT count(*) FROM step), NULL, '[]', 0"

# Every statement a step can be: (first step?, queue part?) -> SQL.
WRITES = {
    (first, queue): (MOVE_FIRST if first else MOVE) + STEP + (QUEUE if queue else NO_QUEUE)
    for first in (False, True)
    for queue in (False, True)
}
# (A thread with no row, or at 0, has no checkpoint: None.)
LAST_SEQ = "SELECT max(nullif(last_seq, 0)) FROM portal_thread WHERE id = %(thread)s"
# Why a write was refused: the thread's seq now, and whether it was cancelled.
REFUSED = """
SELECT max(nullif(last_seq, 0)), bool_or(cancelled_at IS NOT NULL)
FROM portal_thread WHERE id = %(thread)s
"""
AGENT = "SELECT agent FROM portal_thread WHERE id = %(thread)s"


# -- the run queue (portal.runs.queue) ----------------------------------------------------

# What a run needs of its thread, read by CLAIM (its last line, as thread__<field>) as of
# its snapshot (the thread row is locked by it): the run starts from these, as from a read
# just after.
CLAIMED_THREAD_FIELDS = ("id", "agent", "owner_id", "last_seq", "cancelled_at")

# Take the next claimable run, in one round trip: an expired lease first, then the oldest
# queued run of a thread with nothing earlier unfinished and nothing running (the queued
# branch is only read when no expired lease is found). The run and its thread are locked
# SKIP LOCKED together, so concurrent workers take different runs and two runs of one
# thread never start at once; the same statement marks the run and its thread running.
# It returns the run's columns by name: a worker prepares its claim, and a prepared
# statement returning `r.*` would fail once a migration added a column ("cached plan must
# not change result type"), on every claim until the connection was replaced.
CLAIM = """
WITH expired AS (
    SELECT r.id FROM portal_run r JOIN portal_thread t ON t.id = r.thread_id
    WHERE r.status = 'running' AND r.lease_expires_at < statement_timestamp()
    ORDER BY r.lease_expires_at
    LIMIT 1
    FOR UPDATE OF r, t SKIP LOCKED
), queued AS (
    SELECT r.id FROM portal_run r JOIN portal_thread t ON t.id = r.thread_id
    WHERE r.status = 'queued'
      AND NOT EXISTS (
        SELECT 1 FROM portal_run e WHERE e.thread_id = r.thread_id
        AND e.status IN ('queued', 'running') AND e.created_at < r.created_at)
      AND NOT EXISTS (
        SELECT 1 FROM portal_run b WHERE b.thread_id = r.thread_id AND b.status = 'running')
    ORDER BY r.created_at
    LIMIT 1
    FOR UPDATE OF r, t SKIP LOCKED
), picked AS (
    (SELECT id FROM expired) UNION ALL (SELECT id FROM queued) LIMIT 1
), claimed AS (
    UPDATE portal_run r SET
        status = 'running',
        attempts = r.attempts + 1,
        lease_owner = %(owner)s,
        lease_expires_at = statement_timestamp() + %(lease)s * interval '1 second',
        started_at = coalesce(r.started_at, statement_timestamp())
    FROM picked WHERE r.id = picked.id
    RETURNING r.id, r.thread_id, r.kind, r.status, r.input, r.author_id, r.attempts,
              r.lease_owner, r.lease_expires_at, r.error, r.created_at, r.started_at,
              r.finished_at
), busy AS (
    UPDATE portal_thread t SET status = 'running', updated_at = statement_timestamp()
    FROM claimed WHERE t.id = claimed.thread_id AND t.cancelled_at IS NULL
)
SELECT claimed.*, t.id AS thread__id, t.agent AS thread__agent, t.owner_id AS thread__owner_id,
       t.last_seq AS thread__last_seq, t.cancelled_at AS thread__cancelled_at
FROM claimed JOIN portal_thread t ON t.id = claimed.thread_id
"""

# A run's outcome, when it did not fail, and its thread's status (the rule of
# portal.runs.queue's settling), in one statement: the run is recorded only by its lease
# holder, and the thread, unless cancelled, follows its newest checkpoint. Returns the
# thread's status, or no row when the run was not this worker's any more. The NOTIFY is
# sent at commit.
FINISH = """
WITH finished AS (
    UPDATE portal_run SET status = %(status)s, error = %(error)s, finished_at = %(now)s,
        lease_expires_at = NULL
    WHERE id = %(run)s AND lease_owner = %(owner)s AND status = 'running'
    RETURNING thread_id
), settled AS (
    SELECT finished.thread_id, CASE (
        SELECT c.status FROM portal_checkpoint c WHERE c.thread_id = finished.thread_id
        ORDER BY c.seq DESC LIMIT 1
    ) WHEN 'interrupted' THEN 'interrupted' WHEN 'done' THEN 'done' ELSE 'idle' END AS status
    FROM finished
), moved AS (
    UPDATE portal_thread t SET status = settled.status, updated_at = %(now)s
    FROM settled WHERE t.id = settled.thread_id AND t.cancelled_at IS NULL
)
SELECT settled.status, pg_notify(%(channel)s, %(key)s) FROM settled
"""


# -- idle workers' turn to listen (portal.runs.worker) -----------------------------------

# A session advisory lock: the idle worker holding it is the one a queued run's NOTIFY
# wakes. Any constant nothing else in the database uses ("wakeup" in ASCII).
TURN_KEY = 0x77616B657570
TURN_TAKE = "SELECT pg_advisory_lock(%s)"
TURN_GIVE = "SELECT pg_advisory_unlock(%s)"
