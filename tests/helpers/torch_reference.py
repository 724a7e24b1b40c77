"""What the nn tests compare with torch.nn.Transformer through: parameter names and per-head attention weights."""

import torch

from vaswani import Transformer

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


def torch_reference(model: Transformer) -> torch.nn.Transformer:
    """torch.nn.Transformer of the same dimensions, carrying a copy of our weights."""
    c = model.config
    ref = torch.nn.Transformer(
        c.d_model,
        c.n_heads,
        c.n_layers,
        c.decoder_layers,
        c.d_ff,
        dropout=0.0,
        activation=c.activation,
        layer_norm_eps=c.layer_norm_eps,
        batch_first=True,
        norm_first=c.norm_first,
    )
    ours = dict(model.named_parameters())
    with torch.no_grad():
        for name, param in ref.named_parameters():
            stack, rest = name.split(".", 1)
            if rest.startswith("norm."):  # final LayerNorm of a stack: ours exists only in pre-norm
                if c.norm_first:
                    param.copy_(ours[f"{stack}.{rest}"])
                continue
            _, index, layer_name = rest.split(".", 2)
            ours_name = next(k for k, v in LAYER_NAMES.items() if v == layer_name)
            param.copy_(ours[f"{stack}.layers.{index}.{ours_name}"])
    if not c.norm_first:  # torch always adds a final LayerNorm; the post-norm paper model has none
        ref.encoder.norm = None
        ref.decoder.norm = None
    return ref
