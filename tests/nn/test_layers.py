import pytest
import torch

from tests.helpers.common import tiny_config
from tests.helpers.torch_reference import LAYER_NAMES, torch_attention_weights
from vaswani.nn.cache import KVCache
from vaswani.nn.layers import TransformerLayer


@pytest.mark.parametrize("norm_first", [False, True])
def test_a_causal_layer_without_cross_attention_decodes_incrementally_as_in_one_pass(norm_first):
    """The decoder-only layer: feeding one position at a time with the cache equals the whole sequence
    at once, and a later position never changes an earlier one's output."""
    layer = TransformerLayer(tiny_config(norm_first=norm_first)).eval()
    x = torch.randn(3, 7, 32)
    whole, (k, v), _ = layer(x, causal=True)
    assert k.shape == v.shape == (3, 2, 7, 16)
    past, steps = None, []
    for t in range(7):
        out, past, _ = layer(x[:, t : t + 1], causal=True, past=past)
        steps.append(out)
    assert torch.allclose(torch.cat(steps, dim=1), whole, atol=1e-5)
    changed = x.clone()
    changed[:, 4:] = torch.randn(3, 3, 32)
    assert torch.allclose(layer(changed, causal=True)[0][:, :4], whole[:, :4], atol=1e-6)
    assert not torch.allclose(layer(x)[0][:, :4], whole[:, :4], atol=1e-3)  # bidirectional: it does change


def test_a_layer_with_cross_attention_needs_the_encoder_keys_and_values():
    config = tiny_config()
    layer = TransformerLayer(config, cross=True).eval()
    assert len(layer.norms) == 3 and len(TransformerLayer(config).norms) == 2
    assert TransformerLayer(config).cross_attn is None
    with pytest.raises(ValueError, match="pass memory_kv"):
        layer(torch.randn(2, 3, 32), causal=True)
    x, memory = torch.randn(2, 3, 32), torch.randn(2, 5, 32)
    out, _, (self_w, cross_w) = layer(
        x, causal=True, memory_kv=layer.cross_attn.project_key_value(memory), need_weights=True
    )
    # The reference: torch's decoder layer carrying a copy of the weights.
    ref = torch.nn.TransformerDecoderLayer(
        32, 2, config.d_ff, dropout=0.0, layer_norm_eps=config.layer_norm_eps, batch_first=True
    )
    ours = dict(layer.named_parameters())
    with torch.no_grad():
        for name, ref_name in LAYER_NAMES.items():
            ref.get_parameter(ref_name).copy_(ours[name])
    causal = torch.nn.Transformer.generate_square_subsequent_mask(3)
    expected = torch_attention_weights(ref, lambda: ref(x, memory, tgt_mask=causal))
    torch.testing.assert_close(out, ref(x, memory, tgt_mask=causal), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(self_w, expected["self_attn"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cross_w, expected["multihead_attn"], rtol=1e-5, atol=1e-6)


def test_a_cache_without_an_encoder_part():
    layer = TransformerLayer(tiny_config()).eval()
    _, kv, _ = layer(torch.randn(3, 4, 32), causal=True)
    cache = KVCache((kv, kv))
    assert cache.cross_kv is None and cache.batch_size == 3 and cache.length == 4
    assert cache.expand(2).batch_size == 6 and cache.expand(2).cross_kv is None and cache.expand(2).group == 1
    picked = cache.reorder(torch.tensor([2, 0]))
    assert torch.equal(picked.self_kv[0][0], kv[0][[2, 0]]) and picked.cross_kv is None
