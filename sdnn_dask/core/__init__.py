"""The problem's maths, with no Dask: the network, the layer kernels, the reference, the check.

* :mod:`.network`: :class:`~.network.Network` (weight layers, bias, clamp);
* :mod:`.csr`: float32 CSR helpers below both the network and the kernels;
* :mod:`.kernels`: the compiled per-block layer step and the drivers of a block through all
  layers (every executor maps these);
* :mod:`.reference`: the plain scipy recurrence and the categories;
* :mod:`.check`: the float64 run with a rigorous bound on float32 rounding (PASS/FAIL);
* :mod:`.result`: :class:`~.result.RunResult`, what every strategy returns.
"""
