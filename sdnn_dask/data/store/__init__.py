"""A network on disk in a binary, memory-mappable form, written and read layer by layer.

A *network store* is a folder of plain little-endian ``.npy`` files, one to three per layer
(CSR ``indptr``, ``indices``, ``data``), and a ``manifest.json`` (see :mod:`.manifest` for
the layout). Version 2, which this release writes, keeps each layer as compactly as its
data allows (:mod:`.encoding`): columns as uint16 when N <= 65536, no row pointers when
every row has the same count, no values file when every weight is the same (RadiX-Net:
one uint16 file a layer, 2 bytes an edge); version 1, which it also reads, has all three
files, int64, int32 and float32. A layer's files are read with
``np.load(mmap_mode="r")``: a CSR matrix over read-only memory maps where the files hold
the kernel's dtypes, so only the pages a computation touches are read, and the operating
system may drop them again; otherwise decoded into new arrays, the same canonical CSR bit
for bit. :func:`write_store` writes one layer at a time into a hidden folder beside the
destination and renames it into place once the manifest (written last) is complete, so a
folder named like the store is always a whole store; :func:`convert_challenge` does the
same from the challenge's text files, one Dask task per file, and :func:`convert_store`
from another store (a version-1 store rewritten as version 2).

:func:`open_store` checks what is cheap at once (the manifest, and for every file: present,
its size, its ``.npy`` header's dtype and shape), and a layer when a process first reads
it (see :meth:`NetworkStore.layer`): its files against their SHA-256 in the manifest
(``sdnn.store.verify``, default true; once per file and process) and its contents;
:meth:`NetworkStore.verify` checks every file and layer at once. Anything wrong is a
:class:`~sdnn_dask.data.io.ChallengeFormatError` naming the file (or the manifest).

* :mod:`.encoding`: how a layer's arrays are kept (the version-2 encodings);
* :mod:`.manifest`: the format (file names, format and versions), the manifest's checks
  and each file's checks against it;
* :mod:`.writer`: :class:`StoreWriter`, :func:`write_store`, :func:`write_network`;
* :mod:`.convert`: :func:`convert_challenge`, challenge files into a store on Dask;
  :func:`convert_store`, a store into the current version;
* :mod:`.reader`: :func:`open_store` and :class:`NetworkStore` (layer checks, read-ahead).
"""

from .convert import convert_challenge, convert_layer, convert_store
from .encoding import LayerEncoding
from .manifest import BIAS_FILE, FORMAT, MANIFEST, READS, VERSION, layer_file
from .reader import NetworkStore, check_hash_once, open_store, writable_array
from .writer import StoreWriter, check_destination, write_layer_files, write_network, write_store

__all__ = ["BIAS_FILE", "FORMAT", "MANIFEST", "READS", "VERSION", "LayerEncoding",
           "NetworkStore", "StoreWriter", "check_destination", "check_hash_once",
           "convert_challenge", "convert_layer", "convert_store", "layer_file", "open_store",
           "writable_array", "write_layer_files", "write_network", "write_store"]
