"""The training forward under torch.compile: one graph for every batch shape.

A graph break splits the model into pieces compiled apart (no fusion across them) and recompiled as shapes
change, so that `train.compile` spends its time compiling rather than training. These run
Dynamo alone (a backend that counts the graphs it is given and runs them as they are), so they take seconds
and need no C++ compiler.
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from vaswani.config import ModelConfig
from vaswani.nn import build_model
from vaswani.nn.dropout import Dropout

pytestmark = pytest.mark.slow  # torch.compile

SHAPES = [(6, 9, 7), (3, 5, 11), (8, 12, 4), (5, 7, 7)]  # (batch, source length, target length): all differ


def _compiled(module: torch.nn.Module, graphs: list[torch.fx.GraphModule]):
    def backend(gm: torch.fx.GraphModule, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    counters.clear()
    return torch.compile(module, backend=backend, dynamic=True)


@pytest.mark.parametrize("model_type", ["encoder_decoder", "decoder_only", "encoder_only"])
def test_the_training_forward_is_one_graph_for_every_batch_shape(model_type):
    config = ModelConfig(
        type=model_type, src_vocab_size=40, tgt_vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_layers=2,
        dropout=0.1, attention_dropout=0.1, max_positions=32,
    )  # fmt: skip
    torch.manual_seed(0)
    model = build_model(config).train()
    graphs: list[torch.fx.GraphModule] = []
    forward = _compiled(model.hidden_states, graphs)
    for batch, source, target in SHAPES:
        inputs = (torch.randint(4, 40, (batch, source)), torch.randint(4, 40, (batch, target)))
        inputs[0][0, -2:] = config.pad_id  # a padded row: the mask is an input, not a constant
        hidden = forward(*inputs) if model_type == "encoder_decoder" else forward(inputs[1])
        hidden.sum().backward()  # the backward graph is traced from the same one
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert len(graphs) == 1, f"{len(graphs)} graphs: recompiled for new shapes"
    ops = {str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"}
    assert any("scaled_dot_product_attention" in op for op in ops)  # attention is inside the one graph
    assert any("dropout" in op for op in ops)


def test_dropout_under_compile_drops_p_and_scales_the_rest():
    x = torch.randn(300, 400)
    graphs: list[torch.fx.GraphModule] = []
    module = Dropout(0.3).train()
    y = _compiled(module, graphs)(x)
    assert len(graphs) == 1 and not counters["graph_break"]
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.006  # 120,000 draws: the sd of the mean is 0.0013
    torch.testing.assert_close(y[kept], x[kept] / 0.7)
