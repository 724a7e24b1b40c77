"""What the nn tests compare with torch.nn.Transformer through: parameter names and per-head attention weights."""

import torch

# Our parameter name -> torch.nn.Transformer{Encoder,Decoder}Layer parameter name.
LAYER_NAMES = {
    "self_attn.in_proj.weight": "self_attn.in_proj_weight",
    "self_attn.in_proj.bias": "self_attn.in_proj_bias",
    "self_attn.out_proj.weight": "self_attn.out_proj.weight",
    "self_attn.out_proj.bias": "self_attn.out_proj.bias",
    "cross_attn.in_proj.weight": "multihead_attn.in_proj_weight",
    "cross_attn.in_proj.bias": "multihead_attn.in_proj_bias",
    "cross_attn.out_proj.weight": "multihead_attn.out_proj.weight",
    "cross_attn.out_proj.bias": "multihead_attn.out_proj.bias",
    "feed_forward.linear1.weight": "linear1.weight",
    "feed_forward.linear1.bias": "linear1.bias",
    "feed_forward.linear2.weight": "linear2.weight",
    "feed_forward.linear2.bias": "linear2.bias",
}
for _i in range(3):
    LAYER_NAMES[f"norms.{_i}.weight"] = f"norm{_i + 1}.weight"
    LAYER_NAMES[f"norms.{_i}.bias"] = f"norm{_i + 1}.bias"


def torch_attention_weights(ref: torch.nn.Module, run) -> dict[str, torch.Tensor]:
    """Per-head weights of every torch.nn.MultiheadAttention in `ref` while `run()` runs, by name: each call is
    repeated with need_weights=True on the inputs torch's own layer gave it (those layers ask for none)."""
    weights, handles = {}, []

    def keep(name):
        def hook(module, args, kwargs, output):
            again = {**kwargs, "need_weights": True, "average_attn_weights": False}
            weights[name] = module.forward(*args, **again)[1].detach()

        return hook

    for name, module in ref.named_modules():
        if isinstance(module, torch.nn.MultiheadAttention):
            handles.append(module.register_forward_hook(keep(name), with_kwargs=True))
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return weights
