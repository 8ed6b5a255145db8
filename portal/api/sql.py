"""The SQL of ``portal.api``, by name: what a waiting start or answer reads of its thread.

A start or an answer sent with ``?wait`` looks whether its thread is busy at least twice
(``THREAD_BUSY``), then reads the thread for its answer (``THREAD_WITH_OWNER``). As ORM
queries, composing and compiling them cost the web process more CPU than the database
spent running them; written out they cost almost nothing to prepare. The same SQL on
every backend; the columns are the models' own (``portal.models.rows``).

A request, alone or as its thread's pending one, is read with its thread, the thread's
owner, its claimant and whether it has rows in each relation the API shows
(``VISIBLE_REQUEST``), where the ORM composed a query with two joins per user.

An answer first reads the request it names, with its thread (``NAMED_REQUEST``), to check
the answer against the request's schema before it takes the request's lock.
"""

# Whether anything of the thread is queued or running: a row, or none.
THREAD_BUSY = """
SELECT 1 FROM {run} WHERE thread_id = %s AND status IN (%s, %s) LIMIT 1
"""

# The thread with its owner (all NULL when it has none): {thread} and {owner} are the
# models' columns.
THREAD_WITH_OWNER = """
SELECT {thread}, {owner}
FROM {thread_table} t LEFT JOIN {user_table} u ON u.id = t.owner_id
WHERE t.id = %s
"""

# The request an answer names, if it is this thread's: {request} is the request's id,
# thread and schema, {thread} the thread's columns.
NAMED_REQUEST = """
SELECT {request}, {thread}
FROM {request_table} i JOIN {thread_table} t ON t.id = i.thread_id
WHERE i.id = %s AND i.thread_id = %s
"""

# A request with its thread, the thread's owner and its claimant (each user's columns all
# NULL when there is none), and whether it has votes, assignees and reminders or
# escalations: {request}, {thread}, {owner} and {claimer} are the models' columns.
VISIBLE_REQUEST = """
SELECT {request}, {thread}, {owner}, {claimer},
  EXISTS (SELECT 1 FROM {approval_table} a WHERE a.interrupt_id = i.id),
  EXISTS (SELECT 1 FROM {assignment_table} s WHERE s.interrupt_id = i.id),
  EXISTS (
    SELECT 1 FROM {routing_table} r WHERE r.interrupt_id = i.id AND r.action IN (%s, %s)
  )
FROM {request_table} i
  JOIN {thread_table} t ON t.id = i.thread_id
  LEFT JOIN {user_table} u ON u.id = t.owner_id
  LEFT JOIN {user_table} c ON c.id = i.claimed_by_id
WHERE i.id = %s
"""
