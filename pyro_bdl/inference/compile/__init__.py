"""The speed machinery: functions of tensors made fast, knowing ``torch.fx`` and nothing of Pyro or of a sampler.

* :mod:`~pyro_bdl.inference.compile.aten_trace`: a function as one graph of ATen operations, without ``torch._dynamo``.
* :mod:`~pyro_bdl.inference.compile.graph_folding`: constant folding and simplification of such a graph.
* :mod:`~pyro_bdl.inference.compile.static_runtime`: a graph run by PyTorch's static runtime (else TorchScript).
* :mod:`~pyro_bdl.inference.compile.fastest`: the fastest working form of a batched function (traced, run by the
  static runtime or ``torch.compile``d), checked against the function, falling back with a warning.
* :mod:`~pyro_bdl.inference.compile.fusion`: a step function fused with a traced graph it calls, run traced or
  compiled by inductor, and the caches of one graph's fused steps.
"""
