"""The SQL of ``portal.accounts``, by name: the API's token lookup.

Written out because every API request runs it: as an ORM query (``select_related``, the
permissions as a ``RawSQL`` annotation, ``.first()``) it cost more CPU a request to
compose and compile than the database spent on it (docs/benchmarks.md, "The token, the
waiting look and the answer's thread, written out"). The same SQL on every backend;
only the permissions column's aggregate differs (``roles.permissions_column`` chooses it).
The columns are the models' own (``portal.models.rows``), so the rows load as the ORM's.
"""

# The token with this hash, its user and the user's permissions, in one round trip.
# {token} and {user}: the models' columns; {permissions}: roles.permissions_column.
TOKEN_FOUND = """
SELECT {token}, {user}, {permissions}
FROM {token_table} t JOIN {user_table} u ON u.id = t.user_id
WHERE t.token_hash = %s
"""
