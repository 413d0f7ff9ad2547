"""Import CTranslate2 so that it keeps its own OpenMP runtime instead of sharing torch's.

Both wheels bundle libgomp. ``import torch`` puts torch's copy in the process's global symbol
scope, so CTranslate2 (loaded later, and bound lazily) would resolve ``GOMP_parallel`` there and
run Whisper's thread team in torch's runtime. libgomp counts the threads of all its teams; once
they outnumber the cores it stops spinning between parallel regions, and every parallel operator
then pays a futex wake-up: on two cores the LLM's decode step went from ~19 to ~33 ms and its
prefill from ~85 to ~120 ms as soon as Whisper had run once. Binding CTranslate2 to its own libgomp
(``RTLD_DEEPBIND``, resolved at load time) keeps the two runtimes' counts apart.
"""

from __future__ import annotations

import logging
import os
import sys
from types import ModuleType

log = logging.getLogger(__name__)


def import_ctranslate2() -> ModuleType:
    already = sys.modules.get("ctranslate2")
    if already is not None:
        if "torch" in sys.modules:
            log.debug("ctranslate2 was imported elsewhere first; it may share torch's OpenMP runtime")
        return already
    import numpy  # noqa: F401  -- loaded outside the deep-bind window: only ctranslate2 needs it

    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | os.RTLD_NOW | os.RTLD_DEEPBIND)
    try:
        import ctranslate2
    finally:
        sys.setdlopenflags(flags)
    return ctranslate2
