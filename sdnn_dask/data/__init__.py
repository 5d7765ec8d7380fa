"""Networks and inputs from outside: challenge files, the network store, generators.

* :mod:`.io`: the challenge's TSV files (read and write) and the binary cache;
* :mod:`.store`: a network on disk, one memory-mappable file set per layer;
* :mod:`.streaming`: a store's layers read once, in order, a window ahead;
* :mod:`.radixnet`: seeded RadiX-Net networks (the official N = 1024 layers exactly);
* :mod:`.images`: MNIST-like synthetic inputs.
"""
