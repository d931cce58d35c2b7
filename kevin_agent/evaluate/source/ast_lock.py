"""One lock for ``ast.parse`` across the parent's threads.

CPython before 3.13 keeps the AST converter's recursion depth in interpreter-wide state, so two
threads parsing at once can corrupt it and ``ast.parse`` raises SystemError ("AST constructor
recursion depth mismatch", python/cpython#106905). The parent parses candidate and task sources on
several threads at once (the static stage of concurrent batches, the compile pool, a benchmark's
tasks loading), so each of those parses holds this lock. Parses are bounded by the size limits
checked before them; the lock is reentrant, so a parse inside a held stage is fine.
"""

from __future__ import annotations

import threading

PARSE_LOCK = threading.RLock()
