"""From seeds to a decoded batch, framework-neutral (the front-ends in ibp_graph.loaders shape it).

One batch passes each module once: ``requests`` (the epoch's BatchRequests) -> ``plans`` (the
sampler's output as a BatchPlan) -> ``producer`` (gather -> ``grouping`` -> encode, in a worker, into
``transport``'s shared-memory slots) -> ``batch`` (EncodedBatch, DecodedBatch) -> ``decode`` (copy and
decode on the device or the CPU; then the served rows of ``sources``, built by ``features`` and
``cache``). ``codec_setup`` and ``type_codecs`` choose each group's codec; ``stats`` counts bytes and
seconds. docs/architecture.md says what each module owns.
"""
