"""Softmax cross-entropy, shared by the reference and the compiled path."""

from __future__ import annotations

import numpy as np

__all__ = ["as_labels", "softmax_cross_entropy"]


def as_labels(labels: np.ndarray, rows: int, classes: int) -> np.ndarray:
    """``labels`` as an int64 vector of ``rows`` class ids in ``[0, classes)``; raises else."""
    out = np.asarray(labels)
    if out.shape != (rows,):
        raise ValueError(f"labels must have shape ({rows},), got {out.shape}")
    if not np.issubdtype(out.dtype, np.integer):
        raise TypeError(f"labels must be integers, got {out.dtype}")
    if rows and (out.min() < 0 or out.max() >= classes):
        raise ValueError(f"labels must be in [0, {classes}), got {out.min()}..{out.max()}")
    return out.astype(np.int64, copy=False)


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy over the batch, and its gradient for the logits.

    Parameters
    ----------
    logits
        ``rows x classes``.
    labels
        ``rows`` class ids.

    Returns
    -------
    loss : float
        ``mean_r( logsumexp(logits_r) - logits_r[label_r] )``, computed in float64.
    dlogits : ndarray
        ``(softmax(logits) - onehot(labels)) / rows``, in the dtype of ``logits``.

    Examples
    --------
    >>> loss, d = softmax_cross_entropy(np.zeros((2, 4)), np.array([0, 3]))
    >>> round(loss, 6) == round(float(np.log(4)), 6), d[0].tolist()
    (True, [-0.375, 0.125, 0.125, 0.125])
    """
    rows, classes = logits.shape
    labels = as_labels(labels, rows, classes)
    if rows == 0:
        raise ValueError("a batch needs at least one row")
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)  # shift for exp's range; the loss is unchanged
    log_sum = np.log(np.exp(z).sum(axis=1))
    picked = z[np.arange(rows), labels]
    loss = float(np.mean(log_sum - picked))
    grad = np.exp(z - log_sum[:, None])
    grad[np.arange(rows), labels] -= 1.0
    grad /= rows
    return loss, grad.astype(logits.dtype, copy=False)
