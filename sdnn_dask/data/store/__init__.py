"""A network on disk in a binary, memory-mappable form, written and read layer by layer.

A *network store* is a folder of plain little-endian ``.npy`` files, three per layer (CSR
``indptr``, ``indices``, ``data``), and a ``manifest.json`` (see :mod:`.manifest` for the
layout). A layer is read with ``np.load(mmap_mode="r")``: a CSR matrix over read-only
memory maps, so only the pages a computation touches are read, and the operating system
may drop them again. :func:`write_store` writes one layer at a time into a hidden folder
beside the destination and renames it into place once the manifest (written last) is
complete, so a folder named like the store is always a whole store;
:func:`convert_challenge` does the same from the challenge's text files, one Dask task per
file.

:func:`open_store` checks what is cheap at once (the manifest, and for every file: present,
its size, its ``.npy`` header's dtype and shape) and the contents of a layer when it is
first read (see :meth:`NetworkStore.layer`); :meth:`NetworkStore.verify` also compares
every file with its SHA-256. Anything wrong is a
:class:`~sdnn_dask.data.io.ChallengeFormatError` naming the file.

* :mod:`.manifest`: the format (file names, format and version), the manifest's checks and
  each file's checks against it;
* :mod:`.writer`: :class:`StoreWriter`, :func:`write_store`, :func:`write_network`;
* :mod:`.convert`: :func:`convert_challenge`, challenge files into a store on Dask;
* :mod:`.reader`: :func:`open_store` and :class:`NetworkStore` (layer checks, read-ahead).
"""

from .convert import convert_challenge, convert_layer
from .manifest import BIAS_FILE, FORMAT, MANIFEST, VERSION, layer_file
from .reader import NetworkStore, open_store
from .writer import StoreWriter, check_destination, write_layer_files, write_network, write_store

__all__ = ["BIAS_FILE", "FORMAT", "MANIFEST", "VERSION", "NetworkStore", "StoreWriter",
           "check_destination", "convert_challenge", "convert_layer", "layer_file",
           "open_store", "write_layer_files", "write_network", "write_store"]
