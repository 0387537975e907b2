"""Pure ranking (spec §6): re-exported from :mod:`host_facades.ranking`, where it lives so that a
worker can run a whole search (``host_facades.search_run``). Not a copy: the same objects."""

from host_facades.ranking import *  # noqa: F403
# names ``import *`` skips (private helpers) or that callers import by name
from host_facades.ranking import (  # noqa: F401 - re-exports
    _DATED_RE,
    _RESET_RE,
    DAY_MS,
    DEFAULT_RRF_K,
    EVERGREEN_ROOT_FILES,
    MEDIA_EXTENSIONS,
    Candidate,
    RankingOptions,
    _normalize_path,
    _reset_archive_ms,
    _tiebreak,
    attach_metadata,
    bm25_rank_to_score,
    rank_and_select,
)
