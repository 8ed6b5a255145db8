"""The PostgreSQL statements of ``portal.runs.checkpointer``: one per load and one per write.

The tables are the models' default names, and the INSERTs name every column by hand
(tests/portal/test_checkpointer.py checks both). Parameters that land in a SELECT list are
cast: the server cannot infer their types there, and a NULL would otherwise be text.
"""

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
                                  decided, checkpoint_seq)
    SELECT %(pending_key)s::varchar, id, agent, %(key)s::varchar, %(request_node)s::varchar,
           %(value)s::jsonb, %(message)s::text, %(reason)s::varchar, %(schema)s::jsonb,
           %(tool_call_id)s::varchar, %(tool)s::varchar, %(summary)s::varchar,
           %(pending)s::varchar,
           %(now)s::timestamptz,
           %(expires_at)s::timestamptz, NULL, NULL, NULL, false, %(seq)s::integer
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
