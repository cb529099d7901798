"""What a dropout mask costs: the backend's generator vs ThreeFry in keras.ops.

Not a benchmark with a target: the evidence behind `keras_transformer.layers.
Dropout` and its use under XLA (see `models/_xla_dropout.py`).  One call of
a `Dropout(0.1)` layer in training on float32 attention weights of the
training benchmark's size, (64, 8, 64, 64) = 2.1 M elements, and its
gradient, timed interleaved four ways:

    backend{,_xla}    keras.layers.Dropout's mask (`keras.random.dropout`;
                      on TensorFlow a Philox `StatelessRandomUniformV2`).
    threefry{,_xla}   the same layer inside `threefry_dropout()`: ThreeFry-
                      2x32-20 on the element index, in keras.ops.

each in a `tf.function`, without and with `jit_compile`.  Prints ns per
element and the ratios backend / threefry (> 1: ThreeFry is cheaper).

Read the XLA row with care: alone in a function, TF's Philox fusion runs at
~220 ns per element on this CPU, far slower than inside the training step,
where all its masks cost ~7 ns per element (a sixth of the step); the
in-model figure is `bench_training_throughput.py`'s `ours_untied_philox`.
The row without XLA is the reason ThreeFry is used under XLA only.

    python3 benchmarks/ablate_dropout.py [--quick]
"""

import common  # first: sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads
import numpy as np
import tensorflow as tf

from keras_transformer.layers import Dropout, threefry_dropout

SHAPE = (64, 8, 64, 64)


def make(threefry, jit_compile, x):
    layer = Dropout(0.1, seed=0)

    @tf.function(jit_compile=jit_compile)
    def step(x):
        with tf.GradientTape() as tape, threefry_dropout(threefry):
            tape.watch(x)
            loss = tf.reduce_sum(tf.square(layer(x, training=True)))
        return tape.gradient(loss, x)

    return lambda: step(x).numpy()


def main():
    args = common.parse_args(__doc__.splitlines()[0])
    info = common.machine_info()
    common.print_machine(info)
    shape = (16, 8, 64, 64) if args.quick else SHAPE
    x = tf.random.normal(shape)
    runs = {
        f"{kind}{'_xla' if xla else ''}": make(kind == "threefry", xla, x)
        for xla in (False, True)
        for kind in ("backend", "threefry")
    }
    times = common.interleave(runs, 5 if args.quick else 15, warmup=2, verbose=False)
    elements = int(np.prod(shape))
    results = {"machine": info, "shape": list(shape), "seconds": {}}
    for name, seconds in times.items():
        stats = common.summarize(seconds)
        results["seconds"][name] = stats
        print(f"{name:14s} {stats['median'] / elements * 1e9:6.2f} ns/element "
              f"({common.fmt(stats, 1e3, 'ms', 2)})")
    for tag in ("", "_xla"):
        ratio = common.compare(times, f"backend{tag}", f"threefry{tag}")
        results[f"backend_over_threefry{tag}"] = ratio
        print(f"backend / threefry{tag or ' (no XLA)'}: "
              f"{common.fmt(ratio['paired_ratio'], unit='x', digits=2)}")
    common.append_result("ablate_dropout", results, args)


if __name__ == "__main__":
    main()
