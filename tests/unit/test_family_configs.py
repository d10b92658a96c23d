"""Hub-style (pre-transformers-5) config.json of Pythia, Llama 3.2 and Qwen2 read as transformers reads
them; Processing.applicable. (Adapted from branch rotary's tests to main's adapters.)"""

import pytest
import torch

from headscope import Processing
from headscope._errors import HeadscopeError
from headscope.core.families import read_config

PYTHIA_160M = {"model_type": "gpt_neox", "hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12,
               "num_hidden_layers": 12, "vocab_size": 50304, "max_position_embeddings": 2048, "rotary_pct": 0.25,
               "rotary_emb_base": 10000, "use_parallel_residual": True, "hidden_act": "gelu",
               "layer_norm_eps": 1e-5, "tie_word_embeddings": False}
LLAMA_32_1B = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
               "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 16, "vocab_size": 128256,
               "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
               "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                "original_max_position_embeddings": 8192, "rope_type": "llama3"},
               "tie_word_embeddings": True, "attention_bias": False, "mlp_bias": False, "hidden_act": "silu"}
QWEN2_05B = {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_attention_heads": 14,
             "num_key_value_heads": 2, "num_hidden_layers": 24, "vocab_size": 151936,
             "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
             "sliding_window": 32768, "use_sliding_window": False, "max_window_layers": 21,
             "tie_word_embeddings": True, "hidden_act": "silu"}


def test_pythia_config():
    family, c = read_config(PYTHIA_160M)
    assert family.name == "gpt_neox" and family.tied(PYTHIA_160M) is False
    assert (c.d_head, c.rotary_dim, c.rotary_base, c.parallel_residual, c.norm) == (64, 16, 10000.0, True, "layernorm")
    assert c.act_fn == "gelu" and c.qk_bias and c.rope_scaling == ()


def test_llama_32_config_matches_transformers_rope():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from headscope.core import rotary

    family, c = read_config(LLAMA_32_1B)
    assert family.tied(LLAMA_32_1B) and (c.kv_heads, c.n_heads, c.d_head, c.rotary_dim) == (8, 32, 64, 64)
    assert c.norm == "rmsnorm" and c.gated_mlp and not c.qk_bias
    hc = LlamaConfig(**{k: v for k, v in LLAMA_32_1B.items() if k != "model_type"})
    hf_inv = ROPE_INIT_FUNCTIONS["llama3"](hc, None)[0]
    torch.testing.assert_close(rotary.inv_freq(c).float(), hf_inv.float())


def test_qwen2_config():
    family, c = read_config(QWEN2_05B)
    assert family.name == "qwen2" and c.qk_bias and family.leaves.count("self_attn.o_proj.bias") == 0
    assert (c.kv_heads, c.d_head, c.rotary_base) == (2, 64, 1e6)
    with pytest.raises(HeadscopeError, match="sliding"):
        read_config(QWEN2_05B | {"layer_types": ["sliding_attention"] * 24})


@pytest.mark.parametrize("bad, msg", [({"rotary_pct": 1.5}, "rotary fraction"), ({"rotary_pct": "0.25"}, "partial_rotary_factor"),
                                      ({"rotary_emb_base": -1}, "rope_theta"), ({"rope_scaling": 3}, "rope_scaling")])
def test_bad_rotary_keys_one_line(bad, msg):
    with pytest.raises(HeadscopeError, match=msg) as e:
        read_config(PYTHIA_160M | bad)
    assert "\n" not in str(e.value)


def test_applicable():
    _, llama = read_config(LLAMA_32_1B)
    _, neox = read_config(PYTHIA_160M)
    assert Processing.default().applicable(neox) == Processing.default()
    assert Processing.default().applicable(llama) == Processing(fold_ln=True, center_unembed=True,
                                                                fold_value_biases=True)
    assert Processing.none().applicable(llama) == Processing.none()


GEMMA2_2B = {"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_attention_heads": 8,
             "num_key_value_heads": 4, "head_dim": 256, "num_hidden_layers": 26, "vocab_size": 256000,
             "max_position_embeddings": 8192, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
             "query_pre_attn_scalar": 256, "sliding_window": 4096, "attn_logit_softcapping": 50.0,
             "final_logit_softcapping": 30.0, "hidden_activation": "gelu_pytorch_tanh", "hidden_act": "gelu_pytorch_tanh"}


def test_gemma2_config_and_processing():
    """Gemma-2-2B's config.json: alternating local (even layers) and global layers, caps, divisor √256;
    final soft-capping drops center_unembed (c·tanh(l/c) is not shift-invariant)."""
    from headscope.core.applicability import softcap_caveat

    family, c = read_config(GEMMA2_2B)
    assert family.tied(GEMMA2_2B) and c.attn_windows[:4] == (4096, 0, 4096, 0) and len(c.attn_windows) == 26
    assert (c.attn_softcap, c.final_softcap, c.attn_scale(3), c.kv_heads, c.d_head) == (50.0, 30.0, 16.0, 4, 256)
    assert Processing.default().applicable(c) == Processing(fold_ln=True, fold_value_biases=True)
    assert "50" in softcap_caveat(c) and "30" in softcap_caveat(c)
    _, llama = read_config(LLAMA_32_1B)
    assert softcap_caveat(llama) is None
    with pytest.raises(HeadscopeError, match="attention biases"):
        read_config(GEMMA2_2B | {"attention_bias": True})


def test_opt_word_embed_proj_dim_null_means_hidden_size():
    """transformers reads word_embed_proj_dim null as hidden_size (no projection); it was refused as "None ≠ hidden_size"."""
    from headscope.core.families import read_config

    hf = {"model_type": "opt", "hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 3, "ffn_dim": 40,
          "max_position_embeddings": 37, "vocab_size": 304, "word_embed_proj_dim": None}
    assert read_config(hf)[1].d_model == 24
