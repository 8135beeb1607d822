"""A dict that keeps only its most recently used entries: the library's caches of derivations
and solved steps, which a long-lived process (``symcalc serve``, a notebook) would otherwise
grow by every new shape of question it is sent (issue 34: flat memory over thousands of
questions)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any


class Recent(OrderedDict):
    """At most ``size`` entries; :meth:`get` and assignment make an entry the most recent, and
    an assignment beyond ``size`` drops the least recent. Lookups by ``[]`` and ``in`` do not
    reorder (only the caches' own get/set paths count as use)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get(self, key: Any, default: Any = None) -> Any:
        if key not in self:
            return default
        self.move_to_end(key)
        return self[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)

    def __reduce__(self):
        # pickled (a library in the disk cache, or sent to a worker) as an empty cache of the same size
        return (Recent, (self.size,))
