"""From seeds to a decoded batch, framework-neutral (the front-ends in ibp_graph.loaders shape it).

One batch passes through each module once, in this order:

- ``requests``: BatchRequests, the epoch's batches (input positions, sampling seed; rank share).
- ``plans``: a sampler's output -> BatchPlan (NeighborPlanner, HeteroPlanner; DGL plans its own).
- ``producer``: the one producer: BatchPlan -> gather -> group -> encode, in a DataLoader worker.
- ``grouping``: GroupKey and GroupLayout, tensors grouped by dtype/row shape, split back.
- ``transport``: OutputBuffers, SlotRing, SlotKeeper: the worker writes the batch into
  shared memory (reusable slots, page-locked on CUDA), so handing it over copies nothing.
- ``batch``: EncodedBatch (worker -> main: groups, layouts, the front-end's meta, stage
  times) and DecodedBatch (named tensors and meta).
- ``decode``: DecodeStage, copy and decode on the device (ibp_graph.gpu) or the CPU.
- ``sources``: FeatureSource, the one interface every way feature rows are read implements
  (raw tensor, store, zero-copy store, device cache as a wrapper); Serving, what the decode
  stage reads after decoding (a batch's Served rows).
- ``features``: ``features="worker" | "zero_copy" | "auto"`` and ``device_cache=`` as sources
  (FeaturePlan).
- ``cache``: DeviceCache, the compressed rows of the hottest nodes in device memory.
- ``stats``: LoaderStats, bytes per group and seconds per stage.
- ``codec_setup``: build_codecs, which codec each group gets (fitted once, in the main process).
"""
