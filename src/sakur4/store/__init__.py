"""The store: one SQLite file for every project (SPEC §3), or one PostgreSQL database
that several machines share (``SAKUR4_STORE=postgresql://…``, issue 39).

- :mod:`.db` opens a connection (WAL, busy timeout, foreign keys) with the
  driver that can load sqlite-vec, and converts driver errors at the boundary.
- :mod:`.postgresql` is the other engine: a psycopg connection that speaks the part
  of sqlite3's the callers use; :mod:`.dialect` is where the two engines' SQL
  differs; :mod:`.postgresql_schema` is each migration's PostgreSQL form.
- :mod:`.opening` opens a store: the file checks, the connection, the migrations.
- :mod:`.migrations` is the ordered schema history, applied on open.
- :mod:`.vectors` is KNN: an exact scan of each project's vectors held in memory.
- :mod:`.projects` keys everything by project.
- :mod:`.roles` grants a PostgreSQL role its projects; row-level security (migration
  m009) keeps it from every other project's rows.
"""

from sakur4.store.db import Store
from sakur4.store.opening import open_store

__all__ = ["Store", "open_store"]
