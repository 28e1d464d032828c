"""From seeds to a decoded batch: grouping, worker-side encode, main-side decode, stats."""
