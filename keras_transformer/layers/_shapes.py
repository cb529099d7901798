"""Shape helpers shared by the layers."""

from keras import ops


def leading_shape(x, count):
    """The first `count` dims of `x`: Python ints where static, scalars where not.

    Static dims keep a reshape's target a constant; `ops.shape` of a traced
    tensor adds Shape/StridedSlice/Pack ops, which a decoding loop pays on
    every step (at batch 1 per-op overhead is most of the step).
    """
    dynamic = None
    dims = []
    for i, dim in enumerate(x.shape[:count]):
        if dim is None:
            dynamic = ops.shape(x) if dynamic is None else dynamic
            dim = dynamic[i]
        dims.append(dim)
    return tuple(dims)
