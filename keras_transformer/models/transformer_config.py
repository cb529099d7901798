"""Configuration of the Transformer and its named presets (paper, Table 3)."""

import dataclasses
import json

PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
RESERVED_TOKENS = ("[PAD]", "[UNK]", "[START]", "[END]")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Every hyper-parameter of a `Transformer`, with the paper's defaults.

    The paper's symbols: N = `num_layers`, d_model = `hidden_dim`,
    h = `num_heads`, d_ff = `intermediate_dim`, d_k = `key_dim`,
    d_v = `value_dim`, P_drop = `dropout`.
    """

    # Shared source/target word-piece vocabulary; the paper's BPE had ~37,000.
    vocabulary_size: int = 37000
    # N: identical layers in each of the encoder and the decoder (Section 3.1).
    num_layers: int = 6
    # d_model: width of every sub-layer output and of the embeddings.
    hidden_dim: int = 512
    # h: parallel attention heads (Section 3.2.2).
    num_heads: int = 8
    # d_ff: inner width of the position-wise feed-forward network (Section 3.3).
    intermediate_dim: int = 2048
    # d_k: width of each query/key head; None means d_model / h.
    key_dim: int | None = None
    # d_v: width of each value head; None means d_k.
    value_dim: int | None = None
    # P_drop: residual and embedding dropout (Section 5.4).
    dropout: float = 0.1
    # Dropout on attention weights; the paper does not use it.
    attention_dropout: float = 0.0
    # Feed-forward activation: ReLU (Section 3.3).
    activation: str = "relu"
    # Longest sequence the model serves; learned positions are this long.
    max_sequence_length: int = 256
    # "sinusoidal" (Section 3.5) or "learned" (Table 3, row E).
    positions: str = "sinusoidal"
    # False: post-LN as the paper; True: pre-LN, stabler for deep stacks.
    normalize_first: bool = False
    # Share encoder, decoder and pre-softmax weights (Section 3.4).
    tie_embeddings: bool = True
    # Target vocabulary when it differs from the source (needs untied weights).
    target_vocabulary_size: int | None = None
    # LayerNorm epsilon; tensor2tensor's value.
    layer_norm_epsilon: float = 1e-6

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        return cls(**json.loads(text))

    def replace(self, **overrides):
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(
                f"Unknown TransformerConfig field(s) {unknown}; valid fields are "
                f"{[f.name for f in dataclasses.fields(self)]}."
            )
        return dataclasses.replace(self, **overrides)


def _row(**overrides):
    return TransformerConfig().replace(**overrides)


# Table 3 of the paper.  Rows (A)-(C) vary one thing of the base model; the
# parameter counts the paper reports are in `PAPER_PARAMETER_COUNTS`.
PRESETS = {
    "tiny": _row(
        vocabulary_size=1000, num_layers=2, hidden_dim=64, num_heads=4,
        intermediate_dim=128, max_sequence_length=64,
    ),
    "small": _row(
        vocabulary_size=8000, num_layers=3, hidden_dim=256, num_heads=8,
        intermediate_dim=1024, max_sequence_length=128,
    ),
    "base": _row(),
    "big": _row(hidden_dim=1024, num_heads=16, intermediate_dim=4096, dropout=0.3),
    "table3_a1": _row(num_heads=1, key_dim=512, value_dim=512),
    "table3_a2": _row(num_heads=4, key_dim=128, value_dim=128),
    "table3_a3": _row(num_heads=16, key_dim=32, value_dim=32),
    "table3_a4": _row(num_heads=32, key_dim=16, value_dim=16),
    "table3_b1": _row(key_dim=16, value_dim=64),
    "table3_b2": _row(key_dim=32, value_dim=64),
    "table3_c1": _row(num_layers=2),
    "table3_c2": _row(num_layers=4),
    "table3_c3": _row(num_layers=8),
    "table3_c4": _row(hidden_dim=256, key_dim=32, value_dim=32),
    "table3_c5": _row(hidden_dim=1024, key_dim=128, value_dim=128),
    "table3_c6": _row(intermediate_dim=1024),
    "table3_c7": _row(intermediate_dim=4096),
}

# Millions of parameters, Table 3 ("params x10^6"); rows (A) print none
# because h·d_k = d_model keeps the count of the base model.
PAPER_PARAMETER_COUNTS = {
    "base": 65, "table3_b1": 58, "table3_b2": 60, "table3_c1": 36,
    "table3_c2": 50, "table3_c3": 80, "table3_c4": 28, "table3_c5": 168,
    "table3_c6": 53, "table3_c7": 90, "big": 213,
}


def get_preset(name, **overrides):
    """The named preset with `overrides` applied; unknown names are an error."""
    if name not in PRESETS:
        raise ValueError(f"Unknown preset name={name!r}; available presets: {sorted(PRESETS)}.")
    return PRESETS[name].replace(**overrides)
