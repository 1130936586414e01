"""Cache policy ``none``: nothing is shared, every page goes back to the caller."""

from __future__ import annotations

from hinge.builtin.no_cache import NoCachePolicy
from hinge.contracts import CachePolicy


def test_no_cache_never_matches_and_returns_every_inserted_page():
    cache = NoCachePolicy(None, None)
    assert isinstance(cache, CachePolicy)
    assert not cache.capabilities.prefix_sharing
    cache.insert([1, 2, 3, 4], [7])
    hit = cache.match([1, 2, 3, 4, 5])
    assert hit.length == 0 and hit.pages == ()
    cache.lock(hit)
    cache.unlock(hit)
    assert cache.insert([1, 2, 3], [4, 9]) == [4, 9]
    assert cache.evict(10) == [] and cache.flush() == [] and cache.num_evictable_pages() == 0
