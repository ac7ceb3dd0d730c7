"""The SQLite store: one file for every project (SPEC §3).

- :mod:`.db` opens a connection (WAL, busy timeout, foreign keys) with the
  driver that can load sqlite-vec, and converts driver errors at the boundary.
- :mod:`.opening` opens a store: the file checks, the connection, the migrations.
- :mod:`.migrations` is the ordered schema history, applied on open.
- :mod:`.vectors` is KNN: an exact scan of each project's vectors held in memory.
- :mod:`.projects` keys everything by project.
"""

from sakur4.store.db import Store
from sakur4.store.opening import open_store

__all__ = ["Store", "open_store"]
