"""Size of the covariances a full-mode transformer block allocates.

Full mode stores, per example, covariances over all tokens and features
at once, so memory grows with the square of J * width and with J^4 for
the attention scores. The tensors (float32, B = batch, J = seq_len,
W = width, H = num_heads, K = key_dim, Dv = value_dim, F = ff_dim):

    activations      [B, (J*D)^2]        D in {W, H*K, H*Dv, F}
    dense halves     [B, J^2 * Din*Dout] x's covariance times one kernel
                                        (`linear.dense`) for every dense
    score covariance [B, H, J^4]        per-head cov of q k^T and softmax
    score halves     [B, H, J^3 * K]    `products.matmul` for q k^T
    value halves     [B, H, J^3 * Dv]   and [B, H, (J*Dv)^2] for p @ v

`full_covariance_bytes` is the largest of them: a lower bound on the peak
(an operation's inputs and output are alive together, so the peak is a
small multiple of it). `check_full_covariance` compares it with a budget
before anything is allocated.
"""

from tfp_bnn import _validation as check


def full_covariance_sizes(batch, seq_len, width, num_heads, key_dim, value_dim, ff_dim):
    """Bytes of each kind of float32 covariance tensor of a full-mode block.

    Args:
        batch: B, the number of examples, a positive int.
        seq_len: J, tokens per example, a positive int.
        width: I, the model width, a positive int.
        num_heads: H, attention heads, a positive int.
        key_dim: K, the query and key head size, a positive int.
        value_dim: Dv, the value head size, a positive int.
        ff_dim: F, the feed-forward hidden width, a positive int.

    Returns:
        dict name -> bytes (see the module docstring for the names).

    Example:
    >>> sizes = full_covariance_sizes(1, 4, 8, 2, 4, 4, 16)
    >>> sizes["score covariance"]   # 4 bytes * B H J^4
    2048
    """
    for name, value in (("batch", batch), ("seq_len", seq_len), ("width", width),
                        ("num_heads", num_heads), ("key_dim", key_dim),
                        ("value_dim", value_dim), ("ff_dim", ff_dim)):
        check.integer(name, value)
    b, j, h = batch, seq_len, num_heads
    widths = (width, h * key_dim, h * value_dim, ff_dim)
    denses = (width * h * key_dim, width * h * value_dim, h * value_dim * width,
              width * ff_dim)
    sizes = {
        "activation covariance": b * (j * max(widths)) ** 2,
        "dense half product": b * j * j * max(denses),
        "score covariance": b * h * j**4,
        "score half product": b * h * j**3 * key_dim,
        "value half product": b * h * max(j**3 * value_dim, (j * value_dim) ** 2),
    }
    return {name: 4 * count for name, count in sizes.items()}


def full_covariance_bytes(batch, seq_len, width, num_heads, key_dim, value_dim, ff_dim):
    """Bytes of the largest float32 covariance tensor of a full-mode block.

    Args:
        batch: B, the number of examples, a positive int.
        seq_len: J, tokens per example, a positive int.
        width: I, the model width, a positive int.
        num_heads: H, attention heads, a positive int.
        key_dim: K, the query and key head size, a positive int.
        value_dim: Dv, the value head size, a positive int.
        ff_dim: F, the feed-forward hidden width, a positive int.

    Returns:
        int, bytes.

    Example:
    >>> full_covariance_bytes(1, 4, 8, 2, 4, 4, 16)   # 4 bytes * (J F)^2
    16384
    """
    return max(full_covariance_sizes(batch, seq_len, width, num_heads, key_dim,
                                     value_dim, ff_dim).values())


def check_full_covariance(batch, seq_len, width, num_heads, key_dim, value_dim, ff_dim,
                          max_bytes):
    """Raises a ValueError if full mode would allocate more than `max_bytes`.

    Call it before propagating: it only does arithmetic on the sizes.

    Args:
        batch: B, the number of examples, a positive int.
        seq_len: J, tokens per example, a positive int.
        width: I, the model width, a positive int.
        num_heads: H, attention heads, a positive int.
        key_dim: K, the query and key head size, a positive int.
        value_dim: Dv, the value head size, a positive int.
        ff_dim: F, the feed-forward hidden width, a positive int.
        max_bytes: the budget for one tensor, in bytes.

    Returns:
        The estimate in bytes, if within budget.

    Raises:
        ValueError: naming the sizes, the estimate and `max_bytes`, and
            suggesting mode="diagonal".

    Example:
    >>> check_full_covariance(1, 4, 8, 2, 4, 4, 16, max_bytes=2**20)
    16384
    >>> check_full_covariance(32, 64, 64, 4, 16, 16, 256, max_bytes=2**30)
    Traceback (most recent call last):
    ...
    ValueError: Full-mode moments for batch=32, ... Use mode="diagonal" ...
    """
    check.positive("max_bytes", max_bytes)
    sizes = full_covariance_sizes(batch, seq_len, width, num_heads, key_dim, value_dim, ff_dim)
    name = max(sizes, key=sizes.get)
    if sizes[name] > max_bytes:
        raise ValueError(
            f"Full-mode moments for batch={batch}, seq_len={seq_len}, width={width}, "
            f"num_heads={num_heads}, key_dim={key_dim}, value_dim={value_dim}, "
            f"ff_dim={ff_dim} need a {name} of {sizes[name]:,} bytes "
            f"({sizes[name] / 2**30:.3g} GiB), over `max_bytes`={int(max_bytes):,}. "
            "Use mode=\"diagonal\" (memory linear in seq_len * width), or a smaller "
            "batch or sequence."
        )
    return sizes[name]
