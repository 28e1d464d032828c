"""From seeds to a decoded batch, framework-neutral: requests -> plans -> producer (gather, grouping,
encode into transport's slots) -> batch -> decode (then the served rows of sources, built by features
and cache); codec_setup picks each group's codec, stats counts. docs/architecture.md: each module's role.
"""
