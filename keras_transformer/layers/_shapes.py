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


def reshape_dims(x, count):
    """The first `count` dims of `x` as part of a reshape's target.

    As `leading_shape`, but a single unknown dim is -1, so that a reshape
    whose other dims are all static needs no shape ops at all (the batch of
    a decoding step is the usual one).  Only for a target whose remaining
    dims are known: -1 stands for whatever they leave.
    """
    unknown = [i for i, dim in enumerate(x.shape[:count]) if dim is None]
    if len(unknown) == 1:
        return tuple(-1 if dim is None else dim for dim in x.shape[:count])
    return leading_shape(x, count)
