"""Every layer inside a layer or a model, found through its public attributes."""

import keras


def sublayers(layer):
    """The layers inside `layer` (not `layer` itself), each once, depth first.

    A Keras model lists its graph's layers in `layers`; the layers of this
    package keep their own sublayers as public attributes (`self_attention`,
    `feed_forward`, `encoder_blocks`, ...), and a Keras layer holds any it
    owns the same way.  So the search follows `layers` and every public
    attribute that is a layer, or a list, tuple or dict of them.

    Example:
    >>> model = keras_transformer.models.Transformer.from_preset("tiny")
    >>> drops = [l for l in sublayers(model) if isinstance(l, keras.layers.Dropout)]
    """
    seen, found = {id(layer)}, []

    def visit(value):
        if isinstance(value, keras.layers.Layer):
            if id(value) not in seen:
                seen.add(id(value))
                found.append(value)
                visit_attributes(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)

    def visit_attributes(owner):
        if isinstance(owner, keras.Model):
            visit(list(owner.layers))
        for name, value in vars(owner).items():
            if not name.startswith("_"):
                visit(value)

    visit_attributes(layer)
    return found
