"""BERT encoders as Hugging Face's BertModel defines them (post-norm, erf GELU, tanh pooler)."""

from __future__ import annotations

from dataclasses import dataclass

from tvm.relax.frontend import nn

from .layers import Dense, layer_norm, multi_head_attention, set_fill
from .loaded import Fill

LN_EPS = 1e-12
# Added to the scores of masked-out keys: large enough to zero them after softmax, finite so
# a row with every key masked stays finite too (HF uses the dtype's minimum; same effect).
MASKED_SCORE = -10000.0


@dataclass(frozen=True)
class BertConfig:
    vocab: int
    hidden: int
    layers: int
    heads: int
    intermediate: int
    max_positions: int = 512
    type_vocab: int = 2


VARIANTS = {
    "bert": BertConfig(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072),
    "bert-tiny": BertConfig(vocab=30522, hidden=128, layers=2, heads=2, intermediate=512),
}


def embedding(num: int, dim: int) -> nn.Embedding:
    table = nn.Embedding(num, dim)
    set_fill(table.weight, Fill.normal(0.02))  # BERT's initializer_range
    return table


class Embeddings(nn.Module):
    def __init__(self, config: BertConfig):
        self.word_embeddings = embedding(config.vocab, config.hidden)
        self.position_embeddings = embedding(config.max_positions, config.hidden)
        self.token_type_embeddings = embedding(config.type_vocab, config.hidden)
        self.LayerNorm = layer_norm(config.hidden, LN_EPS)

    def forward(self, input_ids, token_type_ids):
        seq = input_ids.shape[1]
        # Positions 0..seq-1: the first rows of the table, one slice instead of a gather.
        positions = nn.split(self.position_embeddings.weight, [seq], axis=0)[0]
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) + positions
        return self.LayerNorm(x)


class Layer(nn.Module):
    def __init__(self, config: BertConfig):
        self.heads = config.heads
        self.query = Dense(config.hidden, config.hidden)
        self.key = Dense(config.hidden, config.hidden)
        self.value = Dense(config.hidden, config.hidden)
        self.attention_output = Dense(config.hidden, config.hidden)
        self.attention_LayerNorm = layer_norm(config.hidden, LN_EPS)
        self.intermediate = Dense(config.hidden, config.intermediate)
        self.output = Dense(config.intermediate, config.hidden)
        self.output_LayerNorm = layer_norm(config.hidden, LN_EPS)

    def forward(self, x, additive_mask):
        context = multi_head_attention(self.query(x), self.key(x), self.value(x), self.heads, additive_mask)
        x = self.attention_LayerNorm(x + self.attention_output(context))
        return self.output_LayerNorm(x + self.output(nn.gelu(self.intermediate(x))))


class BertModel(nn.Module):
    """Returns (last_hidden_state [B, S, H], pooler_output [B, H]), like BertModel."""

    def __init__(self, config: BertConfig):
        self.config = config
        self.embeddings = Embeddings(config)
        self.encoder = nn.ModuleList([Layer(config) for _ in range(config.layers)])
        self.pooler = Dense(config.hidden, config.hidden)

    def forward(self, input_ids, token_type_ids, attention_mask):
        batch, seq = input_ids.shape
        # [B, S] of 1 (attend) / 0 (padding) -> [B, 1, 1, S] of 0 / MASKED_SCORE.
        keep = nn.reshape(nn.astype(attention_mask, "float32"), [batch, 1, 1, seq])
        additive_mask = (1.0 - keep) * MASKED_SCORE
        x = self.embeddings(input_ids, token_type_ids)
        for layer in self.encoder:
            x = layer(x, additive_mask)
        first_token = nn.reshape(nn.split(x, [1], axis=1)[0], [batch, self.config.hidden])
        return x, nn.tanh(self.pooler(first_token))


def network(variant: str) -> nn.Module:
    return BertModel(VARIANTS[variant])
